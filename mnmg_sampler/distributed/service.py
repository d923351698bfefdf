"""SamplingService: one per rank, inside the trainer's process.

Any number of local clients (loaders, prefetched batches, threads) :meth:`~SamplingService.submit`
requests and get futures. Each **round** takes every pending local request (whole bursts of
:meth:`~SamplingService.submit_all`, one of each source); the ranks agree on the round with one
small all-reduce (pending counts and done flags), then sample all merged requests with one
kernel call per hop per rank and fetch their features. A rank with nothing to ask still joins
every round, serving the others, until every rank has shut down; where rounds exchange, a round
in which it has nothing yet is held once for it (rounds one apart cost the larger). With the shared
topology a round exchanges nothing, so merging saves nothing and the round is balanced instead:
each rank samples as many of its requests as the rank with the fewest (at least one) and keeps
the rest, oldest first, for its next rounds (a round lasts as long as its slowest rank).

Modes: ``thread`` (default with gloo: rounds on the service's own group overlap training) and
``inline`` (default with NCCL: rounds run in the caller's thread while it waits, keeping one
kernel order on every rank); see docs/architecture.md#service-modes-thread-and-inline.

Deadlines: every collective of the service's group has the group's timeout (by default the
default group's, e.g. ``runtime.collective_timeout_s``). A round that fails fails every request
it took; a service thread that dies fails everything queued or taken; :meth:`result` and
:meth:`shutdown` give up after the timeout plus :data:`MARGIN_S` without progress and raise a
:class:`~mnmg_sampler.errors.PeerError` naming the step that did not complete. A service never
shut down is stopped at interpreter exit, before the process group is torn down.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout

import torch
import torch.distributed as dist

from ..errors import MnmgError, PeerError, SamplingInputError, ServiceError
from ..sampling.sampler import SampleRequest
from .collective import group_timeout, is_peer_failure, peer_error, peer_errors, uses_nccl
from .sampler import DistSampler
from .teardown import at_exit

log = logging.getLogger(__name__)
MODES = ("thread", "inline")
MARGIN_S = 5.0  # a wait gives up after the collective timeout plus this, without progress
#: longest sleep of an idle service thread between agreements: idle, its rounds back off from
#: ``idle_sleep_s``, doubling, to this (a peer's first request after a pause waits at most this
#: long for the others to join; a local request wakes the thread at once)
IDLE_MAX_S = 0.1
_LIVE: weakref.WeakSet = weakref.WeakSet()  # services whose rounds a fork waits for
_POLL_S = 0.25  # how often a waiting caller checks the service's progress
_BUSY_TICKS = 10  # CPU clock ticks (10 ms) of the service threads that count as progress


class SamplingService:
    """Merges every local client's requests into collective sampling rounds.

    Args:
        part: this rank's partition (from ``load_partition``).
        seed: the sampling seed (first RNG counter).
        group: process group for sampling traffic; default: a new group made from the default
            group (collective: every rank constructs its service at the same point).
        mode: ``thread`` or ``inline`` (see module docstring); ``None`` picks by backend.
        features: fetch ``x``/``y`` rows with each minibatch (needs them in the partition).
        placement: feature placement, ``host``, ``pinned`` or ``device``.
        device: device for ``placement='device'``.
        kernel: ``cpu``, ``cuda`` (the CSR on ``device``) or ``auto`` (``cuda`` when ``device``
            is a CUDA device).
        timeout_s: collective timeout of the service's own group (default: the default group's);
            a rank that stops serving makes the others fail after this long instead of hanging.
        idle_sleep_s: the service thread's first sleep before a round when its queue is empty;
            while every rank stays idle the sleeps double up to :data:`IDLE_MAX_S`, and a local
            request or :meth:`shutdown` ends one at once.
        max_requests_per_round: take at most this many pending local requests per round
            (``None``: all of them). ``1`` disables merging, for benchmarks and debugging.
        host_memory, id_maps, shared_topology: as :class:`~.sampler.DistSampler` (the same on
            every rank); the host memory also holds other hosts' feature rows. Their use is in
            :meth:`stats` under ``placement``, ``features`` and ``shared_topology``.
        rounds_in_flight: rounds run at once, each on its own group (see :meth:`_in_flight`).
        feature_cache_plan: ``(fanouts, batch size[, requests per round])`` the loaders will
            ask for (per round: a loader's refill, 4 by default): the feature cache takes the
            rows whose cache saves most fetches in such rounds
            (:mod:`~mnmg_sampler.distributed.row_cache`); ``None``: by degree.

    On a typed part the same service takes typed requests and fetches ``x``/``y`` of every
    node type.
    """

    def __init__(self, part, seed: int = 0, group: dist.ProcessGroup | None = None,
                 mode: str | None = None, features: bool = True, placement: str = "host",
                 device: torch.device | None = None, idle_sleep_s: float = 0.002,
                 max_requests_per_round: int | None = None,
                 timeout_s: float | None = None, kernel: str = "auto",
                 host_memory: int | None = None, id_maps: str = "auto",
                 shared_topology: bool | str = "auto",
                 rounds_in_flight: int | str = "auto",
                 feature_cache_plan: tuple | None = None) -> None:
        if max_requests_per_round is not None and int(max_requests_per_round) < 1:
            raise ServiceError(f"max_requests_per_round must be >= 1, got "
                               f"{max_requests_per_round}", "no request could ever be served",
                               "pass None (merge all pending requests) or a positive count")
        self.max_requests_per_round = max_requests_per_round
        self._own_group = group is None
        if group is None:
            from ..system.runtime import timeout_delta

            timeout = timeout_delta(timeout_s or group_timeout(None), "timeout_s")
            with peer_errors("creating the sampling service's process group"):
                group = dist.new_group(backend=dist.get_backend(), timeout=timeout)
        self.group = group
        self.timeout_s = group_timeout(group)
        self.deadline_s = self.timeout_s + MARGIN_S
        self.mode = mode or ("inline" if uses_nccl(group) else "thread")
        if self.mode not in MODES:
            raise ServiceError(f"unknown service mode {self.mode!r}", "", f"use one of {MODES}")
        if kernel == "auto":
            kernel = "cuda" if device is not None and device.type == "cuda" else "cpu"
        self.sampler = DistSampler(part, seed, group, kernel=kernel, id_maps=id_maps,
                                   device=device if kernel == "cuda" else None,
                                   shared_topology=shared_topology, host_memory=host_memory)
        self.features = None
        if features and (part.layout.x or part.layout.y):
            from .features import DistFeatureStore
            from .row_cache import CachePlan

            self.features = DistFeatureStore(part, self.sampler.ex, placement, device,
                                             fit=getattr(self.sampler, "placement", None),
                                             cache_plan=None if feature_cache_plan is None
                                             else CachePlan(*feature_cache_plan),
                                             shared=self.sampler.shared,
                                             host=getattr(self.sampler, "host", None))
        self._lock = threading.Lock()  # one round at a time (inline mode, several clients)
        self._slots = [_Slot(self.sampler, self.features, self._lock)]
        self.rounds_in_flight = self._in_flight(rounds_in_flight, part)
        for _ in range(1, self.rounds_in_flight):  # collective: every rank makes the groups
            with peer_errors("creating a process group for another round in flight"):
                g = dist.new_group(backend=dist.get_backend(), timeout=timeout)
            sampler = self.sampler.on_group(g)
            self._slots.append(_Slot(sampler, None if self.features is None else
                                     self.features.on_exchanger(sampler.ex),
                                     threading.Lock(), g))
        self.num_nodes = int(part.num_nodes)
        # a renumbered graph: the input's ids (mapped file), in which loaders take seeds
        self.node_ids = getattr(part, "node_ids", None)
        self._q: queue.Queue = queue.Queue()
        self._burst = threading.Lock()  # a burst of submit_all enters the queue as one
        self._bursts = 0  # bursts queued so far (a burst's number tells two of a source apart)
        # Balanced rounds (module docstring) only where a round exchanges nothing: where rows
        # cross hosts, merging saves fetches, and the loaders' bursts (submit_all) keep the
        # ranks' rounds in step (rmat:20, 2 hosts, topology and a tenth of the rows: 3.9
        # requests per round merged, 2.8 balanced; docs/performance.md#rounds-in-step-issue-34)
        self._balanced = (self.sampler.shared is not None and len(self._slots) == 1
                          and (self.features is None or self.features.shared is not None))
        self._held: deque = deque()  # (request, future, burst) taken but left for later
        self._closing = threading.Event()
        self._closed = False
        self._failed: MnmgError | None = None
        self._idle = idle_sleep_s
        self._wake = threading.Event()  # a request or shutdown: end the idle sleep now
        # round_calls: collectives of working rounds (agreement included; idle ones apart),
        # round_agreements: the agreements among them
        self._stats = {"rounds": 0, "idle_rounds": 0, "round_calls": 0, "round_agreements": 0,
                       "requests": 0, "hops": 0,
                       "t_kernel": 0.0, "t_round": 0.0, "t_wait": 0.0, "t_wait_rows": 0.0,
                       "waits": 0}
        self._fork_held: list = []  # round locks a fork holds
        _LIVE.add(self)
        self._stats_lock = threading.Lock()  # rounds in flight update the statistics
        self._thread = None
        self._threads: list[threading.Thread] = []
        self._exit_stop = None
        if self.mode == "thread":  # one thread per round in flight, each on its own group
            self._threads = [threading.Thread(target=self._serve, args=(slot,), daemon=True,
                                              name=f"mnmg-sampling-service-{i}")
                             for i, slot in enumerate(self._slots)]
            self._thread = self._threads[0]
            for t in self._threads:
                t.start()
            # never shut down: stop the threads at exit, before the groups are torn down
            self._exit_stop = at_exit(functools.partial(
                _stop_at_exit, self._closing, self._threads, self.deadline_s))

    def _in_flight(self, value: int | str, part) -> int:
        """Rounds in flight. ``auto``: 2 where rounds merge nothing
        (``max_requests_per_round=1``: a second round's kernels fill the first's exchange
        waits; merged rounds did not win, docs/performance.md), else 1. More than one needs
        thread mode, the CPU kernel, the wire path or several hosts, and a group of the
        service's own. Agreed by one all-reduce: an explicit ``K`` must be the same on every
        rank; ranks that all pass ``auto`` take the fewest."""
        s = self.sampler
        can = (self.mode == "thread" and self._own_group
               and getattr(s, "host_channel", None) is None
               and getattr(s, "kernel", "cpu") == "cpu")
        auto = value == "auto"
        k = (2 if can and self.max_requests_per_round == 1 and s.ex.world_size > 1 else 1) \
            if auto else value
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ServiceError(f"rounds_in_flight must be 'auto' or an integer >= 1, got "
                               f"{value!r}", "no service is started", "pass 'auto' or e.g. 2")
        if k > 1 and not can:
            raise ServiceError(f"rounds_in_flight={k} needs thread mode, the service's own "
                               "process groups, the CPU kernel and no shared topology on "
                               "one host",
                               "no service is started", "pass rounds_in_flight='auto'")
        if s.ex.world_size > 1:
            with peer_errors("agreeing on the rounds in flight"):
                hi, lo, not_auto = s.ex.agree_max([k, -k, int(not auto)])
            if not not_auto:  # every rank chose auto: the fewest rounds any rank can run
                return -lo
            if hi != -lo:
                raise ServiceError(f"the ranks keep different rounds in flight (this rank: "
                                   f"{value!r})",
                                   "their rounds could not be matched; no service is started",
                                   "pass the same rounds_in_flight on every rank")
        return k

    # -- clients -------------------------------------------------------------------------------
    def submit(self, request: SampleRequest) -> Future:
        """Queue one request; its future resolves to a :class:`MiniBatch` (or raises). On a
        typed part, requests are :class:`~mnmg_sampler.sampling.sampler.HeteroSampleRequest`
        and batches :class:`~mnmg_sampler.sampling.batch.MiniBatch`."""
        return self.submit_all([request])[0]

    def submit_all(self, requests: Sequence[SampleRequest], source=None) -> list[Future]:
        """:meth:`submit` each request, queued as one: a round takes all or none (a round that
        took a burst's first request put the ranks' rounds out of step: 1 against 16).

        ``source`` (any hashable, e.g. a loader's ``id``): a round takes at most one burst of
        each source, so a consumer that outruns the rounds cannot put two of its refills in one
        rank's round while another rank's round takes one (a round lasts as long as its
        largest; the loaders pass themselves)."""
        futs = [Future() for _ in requests]
        queued = []
        for request, fut in zip(requests, futs, strict=True):
            if self._failed is not None:
                fut.set_exception(self._failure())
            elif self._closing.is_set():
                fut.set_exception(ServiceError("the sampling service is shut down",
                                               "no more requests are served",
                                               "submit before calling shutdown()"))
            else:
                try:  # checked here so one bad request never fails a whole round
                    self.sampler.check_request(request, "this request fails; the service and "
                                                        "other requests go on")
                    queued.append((request, fut))
                except SamplingInputError as e:
                    fut.set_exception(e)
        with self._burst:
            self._bursts += 1
            tag = None if source is None else (source, self._bursts)
            for request, fut in queued:
                self._q.put((request, fut, tag))
        self._wake.set()
        if self._failed is not None:  # the thread failed while we queued: never leave it waiting
            self._fail_all()
        return futs

    def result(self, fut: Future, timeout: float | None = None):
        """Wait for ``fut``; in inline mode, run rounds in this thread until it resolves.

        Raises :class:`PeerError` when the service makes no progress for the collective timeout
        plus :data:`MARGIN_S` (a peer stopped answering), ``TimeoutError`` after ``timeout``.
        """
        t0 = time.perf_counter()
        try:
            if self.mode == "inline":
                while not fut.done():
                    if not self.run_round() and not fut.done():
                        _settle(fut, exc=self._stopped_error())
                return fut.result()
            watch = None  # made at the first poll: a batch that is ready reads no /proc
            while True:
                try:
                    return fut.result(_POLL_S)
                except FutureTimeout:
                    pass
                if timeout is not None and time.perf_counter() - t0 >= timeout:
                    raise FutureTimeout(f"no minibatch within {timeout} s")
                if self._failed is not None:
                    self._fail_all()
                elif not self._thread.is_alive():
                    _settle(fut, exc=self._stopped_error())
                else:
                    watch = watch or _Watch(self)
                    watch.check("waiting for a minibatch")
        finally:
            t1 = time.perf_counter()
            rows = getattr(fut, "rows_span", None)  # the serving round's feature fetch
            with self._stats_lock:
                self._stats["waits"] += 1
                self._stats["t_wait"] += t1 - t0
                if rows is not None:  # the part of the wait while its rows were fetched
                    self._stats["t_wait_rows"] += max(0.0, min(t1, rows[1]) - max(t0, rows[0]))

    # -- rounds ----------------------------------------------------------------------------------
    def run_round(self, slot: _Slot | None = None) -> bool:
        """Collective: one round on ``slot`` (default the first); False when every rank is done.

        Agreement (one all-reduce), sampling of every rank's requests together, resolution of
        this rank's futures. A typed error agreed by every rank fails only this round's
        requests; any other failure fails them and raises.
        """
        slot = slot or self._slots[0]
        if not slot.lock.acquire(timeout=self.deadline_s):
            raise self._stall_error("waiting for another thread's sampling round",
                                    self.deadline_s)
        try:
            if self._failed is not None:
                raise self._failure()
            pending, tags = self._take()
            slot.taken = pending
            n = slot.rounds
            slot.rounds += 1
            sampler = slot.sampler
            try:
                # 1. agreement, the round's only one: requests, is any rank still active, and
                # the sampler's flags (input error, hops, remote seeds): one all-reduce, MAX
                slot.step = f"sampling round {n}: the agreement all-reduce"
                done = self._closing.is_set() and not pending
                calls0 = sampler.ex.calls  # this round's collectives, agreement included
                agreements0 = sampler.ex.agreements
                mine, err = sampler.round_flags([r for r, _ in pending])
                # ... and on the fewest pending requests of a rank (as -max(-n))
                flags = sampler.ex.agree_max([len(pending), 0 if done else 1, *mine,
                                              -len(pending)])
                total, active, fewest = flags[0], flags[1], -flags[-1]
                agreed = (err, flags[2:2 + len(mine)])
                keep = max(fewest, 1) if self._balanced and not flags[2] else len(pending)
                # a rank has none yet: its consumer's requests come a moment later. Taken now,
                # the ranks' rounds would stay one apart, each as long as the larger of two
                # unlike ones (a loader's 8 beside another's 1): every rank keeps its requests
                # for the next round, once (not an idle round: no back-off)
                slot.waited = bool(total and not fewest and not self._balanced
                                   and not slot.waited)
                if slot.waited:
                    keep = total = 0
                if len(pending) > keep:  # flags of every pending request bound this round's
                    self._held.extendleft(reversed([(*p, t) for p, t in zip(
                        pending[keep:], tags[keep:], strict=True)]))
                    pending = slot.taken = pending[:keep]
                if total == 0:
                    with self._stats_lock:
                        self._stats["idle_rounds"] += 1
                    slot.worked += slot.waited
                    return active > 0
                slot.worked += 1
                # 2. sampling: every rank's requests in one collective call
                slot.step = f"sampling round {n} (up to {total} requests per rank)"
                t0 = time.perf_counter()
                k0 = sampler.kernel_calls
                if slot.features is not None:
                    slot.features.fetch_span = None
                try:
                    batches = sampler.sample([r for r, _ in pending], slot.features,
                                             agreed=agreed)
                except PeerError:
                    raise
                except MnmgError as e:  # raised on every rank by agreement: fail these requests
                    for _, f in pending:
                        _settle(f, exc=e)
                    return True
                # 3. resolution: statistics first, so a caller woken by its result reads
                # counters that include this round
                st = self._stats
                with self._stats_lock:
                    st["rounds"] += 1
                    st["round_calls"] += sampler.ex.calls - calls0
                    st["round_agreements"] += sampler.ex.agreements - agreements0
                    st["requests"] += len(pending)
                    st["hops"] += sampler.kernel_calls - k0
                    st["t_round"] += time.perf_counter() - t0
                rows = getattr(slot.features, "fetch_span", None)
                for (_, f), b in zip(pending, batches, strict=True):
                    f.rows_span = rows
                    _settle(f, result=b)
                return True
            except BaseException as e:  # a broken round: its callers must not wait forever
                err = self._round_error(e, slot.step)
                self._failed = err  # the group's state is unknown: no more rounds
                for _, f in pending:
                    _settle(f, exc=err)
                while self._held:  # requests held for a later round: none will come
                    _settle(self._held.popleft()[1], exc=err)
                if not isinstance(err, PeerError):
                    self._hang_up(slot)
                if err is e or not isinstance(e, Exception):
                    raise
                raise err from e
            finally:
                slot.taken = []
                slot.step = "idle"
        finally:
            slot.lock.release()

    def _hang_up(self, slot: _Slot) -> None:
        """A round failed here: close this rank's end of the host channel, so peers waiting in
        the next agreement get a :class:`PeerError` at once instead of after the timeout. Gloo
        has no such close (``abort`` leaves its connections up): on the wire path peers still
        wait for the timeout."""
        if slot.sampler.ex.host_channel is not None:
            slot.sampler.ex.host_channel.close()

    def _take(self) -> tuple[list, list]:
        """The round's ``(request, future)`` pairs, held ones first, and the burst of each:
        whole bursts, at most one of each source."""
        pending, tags, taken = [], [], {}
        cap = self.max_requests_per_round
        with self._burst:
            while cap is None or len(pending) < cap:
                if self._held:
                    item = self._held.popleft()
                else:
                    try:
                        item = self._q.get_nowait()
                    except queue.Empty:
                        break
                tag = item[2]
                if tag is not None and taken.setdefault(tag[0], tag[1]) != tag[1]:
                    self._held.appendleft(item)  # the source's next burst: the next round's
                    break
                pending.append(item[:2])
                tags.append(tag)
        return pending, tags

    @property
    def _step(self) -> str:
        """What the service is doing now, for error messages: each round in flight's step."""
        return "; ".join(s.step for s in self._slots if s.step != "idle") or "idle"

    def _round_error(self, e: BaseException, step: str | None = None) -> MnmgError:
        """``e`` as a typed error naming ``step`` (default: every round's in progress)."""
        step = step or self._step
        if isinstance(e, MnmgError):
            return e
        if is_peer_failure(e):
            return peer_error(e, step)
        return ServiceError(f"{step} failed: {type(e).__name__}: {e}",
                            "the requests of this round fail and the service stops",
                            "check the first error in the log on every rank")

    def _serve(self, slot: _Slot) -> None:
        idle = 0  # idle rounds in a row (every rank's: the agreement says so)
        try:
            while True:
                if self._q.empty() and not self._held and not self._closing.is_set():
                    self._wake.wait(idle_sleep(self._idle, idle))
                self._wake.clear()
                n = slot.rounds - slot.worked
                if not self.run_round(slot):
                    break
                idle = idle + 1 if slot.rounds - slot.worked > n else 0
        except BaseException as e:  # a broken collective: fail every waiter, never hang them
            self._failed = self._failed or self._round_error(e)
            log.error("sampling service stopped: %s", self._failed)
            log.debug("sampling service traceback", exc_info=True)
            self._fail_all()

    def _fail_all(self) -> None:
        """Fail every request queued or taken by a round (the service has failed)."""
        err = self._failure()
        for slot in self._slots:
            for _, f in list(slot.taken):
                _settle(f, exc=err)
        while self._held:
            _settle(self._held.popleft()[1], exc=err)
        while True:
            try:
                f = self._q.get_nowait()[1]
            except queue.Empty:
                return
            _settle(f, exc=err)

    def _failure(self) -> MnmgError:
        """A fresh copy of the recorded failure (each raise gets its own traceback)."""
        f = self._failed
        if f is None:
            return self._stopped_error()
        try:
            return type(f)(f.what, f.consequence, f.fix)
        except TypeError:
            return ServiceError(str(f))

    def _stopped_error(self) -> ServiceError:
        return ServiceError("the sampling service has stopped", "this request is not served",
                            "submit requests before shutdown() on every rank")

    def _stall_error(self, waiting: str, seconds: float) -> PeerError:
        return PeerError(f"{waiting}: {self._step} made no progress for {seconds:.0f} s "
                         f"(collective timeout {self.timeout_s:g} s)",
                         "another rank died or stopped answering; this rank stops too",
                         "find the first error in the other ranks' logs; raise "
                         "runtime.collective_timeout_s if a rank is legitimately slow")

    def shutdown(self, timeout: float | None = None) -> None:
        """Collective: stop after every rank's pending requests are served.

        Waits while the service makes progress (other ranks may still be working); raises
        :class:`PeerError` after the collective timeout plus :data:`MARGIN_S` without progress,
        :class:`ServiceError` after ``timeout`` seconds in all, or if the service had failed.
        """
        if self._closed:
            return
        self._closing.set()
        self._wake.set()
        if self._threads:
            watch = _Watch(self)
            t0 = time.perf_counter()
            while any(t.is_alive() for t in self._threads):
                self._wake.set()  # a thread back in its idle sleep: the next agreement now
                for t in self._threads:
                    t.join(_POLL_S / len(self._threads))
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    raise ServiceError("the sampling service did not stop in time",
                                       "another rank may not have called shutdown()",
                                       "call shutdown() on every rank")
                if any(t.is_alive() for t in self._threads):
                    watch.check("shutting down the sampling service")
        elif self._failed is None:
            try:
                while self.run_round():
                    pass
            except MnmgError as e:
                self._failed = e
        self._closed = True
        if self._exit_stop is not None:
            self._exit_stop()  # shut down cleanly: nothing left to stop at exit
        if self._failed is not None:
            raise self._failure()
        # every rank has left its last round before anyone may tear the group down
        with peer_errors("the sampling service's shutdown barrier"):
            dist.barrier(group=self.group)
        if self._own_group:
            for slot in self._slots[1:]:
                dist.destroy_process_group(slot.group)
            dist.destroy_process_group(self.group)

    def __enter__(self) -> SamplingService:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def _progress(self) -> tuple[int, int, int]:
        """Changes whenever a round or an exchange completes, or the service threads compute:
        a thread blocked on a peer uses no CPU, while one compiling a numba kernel on a loaded
        machine is working and must not be taken for a dead peer."""
        return (self._stats["rounds"] + self._stats["idle_rounds"],
                sum(slot.sampler.ex.calls for slot in self._slots),
                _cpu_ticks(self._threads) // _BUSY_TICKS)

    # -- stats -----------------------------------------------------------------------------------
    def stats(self) -> dict:
        """Plain-dict statistics: rounds, requests, merging, kernel calls, bytes, times."""
        st = dict(self._stats)
        st["requests_per_round"] = st["requests"] / st["rounds"] if st["rounds"] else 0.0
        samplers = [slot.sampler for slot in self._slots]
        st["rounds_in_flight"] = len(samplers)
        st["kernel_calls"] = sum(s.kernel_calls for s in samplers)
        st["kernel_edges"] = sum(s.kernel_edges for s in samplers)
        st["bytes_exchanged"] = sum(s.ex.bytes_sent for s in samplers)
        st["exchange_calls"] = sum(s.ex.calls for s in samplers)
        st["t_kernel"] = sum(s.t_kernel for s in samplers)
        st["t_exchange"] = sum(s.ex.t_exchange for s in samplers)
        kinds: dict[str, dict[str, int]] = {}
        for s in samplers:
            for k, v in s.ex.bytes.items():
                b = kinds.setdefault(k, {"self": 0, "others": 0})
                b["self"] += v[0]
                b["others"] += v[1]
        st["bytes_by_kind"] = kinds
        st["shared_topology"] = self.sampler.shared_stats()
        fit = getattr(self.sampler, "placement", None)
        if fit is not None:  # what each host holds of the others (.fit)
            f = self.features
            st["placement"] = fit.report(None if f is None or f.shared is not None
                                         else f.cache_sizes(fit),
                                         "decided" if f is None else f.placement_from)
        if self.features is not None:  # the first round slot's store
            st["features"] = dict(self.features.stats, **self.features.cache_stats())
        return st


def idle_sleep(first: float, idle_rounds: int) -> float:
    """Sleep of the service thread before its next agreement after ``idle_rounds`` idle rounds
    in a row: ``first``, doubling per idle round, at most :data:`IDLE_MAX_S` (``first`` when
    it is longer). An idle minute costs at most about ``60 / IDLE_MAX_S`` agreements."""
    return max(first, min(first * 2.0 ** min(idle_rounds, 30), IDLE_MAX_S))


class _Slot:
    """One round in flight: its sampler (own process group), feature store, lock and the
    requests its round in progress took."""

    def __init__(self, sampler, features, lock: threading.Lock, group=None) -> None:
        self.sampler, self.features, self.lock, self.group = sampler, features, lock, group
        self.taken: list = []  # (request, future) pairs of the round in progress
        self.step = "idle"  # what its round is doing now, for error messages
        self.rounds = 0  # rounds started, idle ones included
        self.worked = 0  # rounds with work, or kept for a rank with none (no back-off)
        self.waited = False  # the last round kept its requests for a rank that had none


class _Watch:
    """Deadline of a waiting caller: fails once the service made no progress for too long."""

    def __init__(self, svc: SamplingService) -> None:
        self.svc = svc
        self.mark = svc._progress()
        self.since = time.monotonic()

    def check(self, waiting: str) -> None:
        mark, now = self.svc._progress(), time.monotonic()
        if mark != self.mark:
            self.mark, self.since = mark, now
        elif now - self.since > self.svc.deadline_s:
            raise self.svc._stall_error(waiting, now - self.since)


def _cpu_ticks(threads: list[threading.Thread]) -> int:
    """CPU time the live ``threads`` used so far, in clock ticks (Linux ``/proc``; 0 where it
    cannot be read, so progress is then rounds and exchanges alone)."""
    total = 0
    for t in threads:
        try:  # fields after the command's ")": state is field 3, utime 14, stime 15
            with open(f"/proc/self/task/{t.native_id}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError, TypeError):  # ended, not Linux, not started
            pass
    return total


def _settle(fut: Future, result=None, exc: BaseException | None = None) -> None:
    """Complete ``fut`` unless it is already done (or cancelled by its caller)."""
    try:
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
    except InvalidStateError:  # completed or cancelled concurrently
        pass


def _before_fork() -> None:
    """``os.fork`` (e.g. a DataLoader's ``fork`` workers) waits, bounded, for every live service's
    round in progress: the child then never inherits a lock or a C++ state held mid-round by
    the service thread (the child must not sample anyway; it gets copies of finished data)."""
    for svc in list(_LIVE):
        if svc._closed or svc._fork_held:
            continue
        held = [slot.lock for slot in svc._slots if slot.lock.acquire(timeout=svc.deadline_s)]
        svc._fork_held = held
        if len(held) < len(svc._slots):
            log.warning("fork during a sampling round that did not end within %.0f s",
                        svc.deadline_s)


def _after_fork() -> None:
    """Parent and child: the rounds may go on (in the child, the lock's copy is released)."""
    for svc in list(_LIVE):
        if svc._fork_held:
            held, svc._fork_held = svc._fork_held, []
            for lock in held:
                lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                        after_in_child=_after_fork)


def _stop_at_exit(closing: threading.Event, threads: list[threading.Thread],
                  deadline_s: float) -> bool:
    """Interpreter exit without shutdown(): let the service threads leave their rounds, bounded.

    Peers exiting too agree that every rank is done; a dead peer fails the round. Either way the
    threads end before torch's process groups are destroyed, so no C++ thread is torn down
    mid-collective (which aborts the process).
    """
    if not any(t.is_alive() for t in threads):
        return True
    log.warning("a SamplingService was not shut down; stopping it at exit")
    closing.set()
    end = time.monotonic() + deadline_s
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in threads):
        log.error("the sampling service thread did not stop within %.0f s at exit", deadline_s)
        return False
    return True
