"""SamplingService: one per rank, inside the trainer's process.

Any number of local clients (loaders, prefetched batches, threads) :meth:`~SamplingService.submit`
requests and get futures. Each **round** takes every pending local request; the ranks agree on
the round with one small all-reduce (pending counts and done flags), then sample all merged
requests with one kernel call per hop per rank and fetch their features. A rank with nothing to
ask still joins every round, serving the others, until every rank has shut down.

Modes:
    ``thread`` (default with gloo): a service thread runs rounds on the sampler's own process
        group while the training loop runs DDP on the default group, so sampling overlaps
        training.
    ``inline`` (default with NCCL): no thread; rounds run in the caller's thread when it waits
        for a batch, i.e. only between training steps. Two NCCL communicators whose kernels are
        launched in different orders on different ranks can deadlock; inline rounds keep one
        order on every rank. This is the safe mode; ``thread`` on NCCL is not verified here.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import time
from concurrent.futures import Future

import torch
import torch.distributed as dist

from ..errors import MnmgError, SamplingInputError, ServiceError
from ..sampler import SampleRequest
from .collective import backend_device
from .sampler import DistSampler

log = logging.getLogger(__name__)
MODES = ("thread", "inline")


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
        kernel: ``cpu`` (numba njit), ``cuda`` (numba.cuda, the partition's CSR on ``device``;
            not yet run on a real GPU) or ``auto`` (``cuda`` when ``device`` is a CUDA device).
        timeout_s: collective timeout of the service's own group (default: torch's default);
            a rank that stops serving makes the others fail after this long instead of hanging.
        max_requests_per_round: take at most this many pending local requests per round
            (``None``: all of them). ``1`` disables merging, for benchmarks and debugging.
    """

    def __init__(self, part, seed: int = 0, group: dist.ProcessGroup | None = None,
                 mode: str | None = None, features: bool = True, placement: str = "host",
                 device: torch.device | None = None, idle_sleep_s: float = 0.002,
                 max_requests_per_round: int | None = None,
                 timeout_s: float | None = None, kernel: str = "auto") -> None:
        if max_requests_per_round is not None and int(max_requests_per_round) < 1:
            raise ServiceError(f"max_requests_per_round must be >= 1, got "
                               f"{max_requests_per_round}", "no request could ever be served",
                               "pass None (merge all pending requests) or a positive count")
        self.max_requests_per_round = max_requests_per_round
        if group is None:
            kw = {"timeout": datetime.timedelta(seconds=timeout_s)} if timeout_s else {}
            group = dist.new_group(backend=dist.get_backend(), **kw)
        self.group = group
        backend = str(dist.get_backend(group)).lower()
        self.mode = mode or ("inline" if backend == "nccl" else "thread")
        if self.mode not in MODES:
            raise ServiceError(f"unknown service mode {self.mode!r}", "", f"use one of {MODES}")
        if kernel == "auto":
            kernel = "cuda" if device is not None and device.type == "cuda" else "cpu"
        self.sampler = DistSampler(part, seed, group, kernel=kernel,
                                   device=device if kernel == "cuda" else None)
        self.features = None
        if features and (part.x is not None or part.y is not None):
            from .features import DistFeatureStore

            self.features = DistFeatureStore(part, self.sampler.ex, placement, device)
        self.num_nodes = int(part.num_nodes)
        self._q: queue.Queue = queue.Queue()
        self._closing = threading.Event()
        self._closed = False
        self._failed: BaseException | None = None
        self._lock = threading.Lock()  # one round at a time (inline mode, several clients)
        self._idle = idle_sleep_s
        self._stats = {"rounds": 0, "idle_rounds": 0, "requests": 0, "hops": 0,
                       "t_kernel": 0.0, "t_round": 0.0, "t_wait": 0.0}
        self._thread = None
        if self.mode == "thread":
            self._thread = threading.Thread(target=self._serve, name="mnmg-sampling-service",
                                            daemon=True)
            self._thread.start()

    # -- clients -------------------------------------------------------------------------------
    def submit(self, request: SampleRequest) -> Future:
        """Queue one request; its future resolves to a :class:`MiniBatch` (or raises)."""
        fut: Future = Future()
        if self._failed is not None:
            fut.set_exception(ServiceError("the sampling service has failed",
                                           f"cause: {self._failed!r}",
                                           "check the first error in the log on every rank"))
            return fut
        if self._closing.is_set():
            fut.set_exception(ServiceError("the sampling service is shut down",
                                           "no more requests are served",
                                           "submit before calling shutdown()"))
            return fut
        try:  # checked here so one bad request never fails a whole round
            self.sampler._check(request.seeds, "this request fails; the service and other "
                                               "requests go on")
        except SamplingInputError as e:
            fut.set_exception(e)
            return fut
        self._q.put((request, fut))
        if self._failed is not None:  # the thread failed while we queued: never leave it waiting
            self._fail_pending(self._failed)
        return fut

    def result(self, fut: Future, timeout: float | None = None):
        """Wait for ``fut``; in inline mode, run rounds in this thread until it resolves."""
        if self.mode == "inline":
            while not fut.done():
                self.run_round()
            return fut.result()
        t0 = time.perf_counter()
        try:
            return fut.result(timeout)
        finally:
            self._stats["t_wait"] += time.perf_counter() - t0

    # -- rounds ----------------------------------------------------------------------------------
    def run_round(self) -> bool:
        """Collective: one round. Returns False when every rank is done (shutting down, idle)."""
        with self._lock:
            pending = []
            while self.max_requests_per_round is None or len(
                    pending) < self.max_requests_per_round:
                try:
                    pending.append(self._q.get_nowait())
                except queue.Empty:
                    break
            done = self._closing.is_set() and not pending
            flags = torch.tensor([len(pending), 0 if done else 1], dtype=torch.int64,
                                 device=backend_device(self.group))
            dist.all_reduce(flags, group=self.group)
            total, active = int(flags[0]), int(flags[1])
            if total == 0:
                self._stats["idle_rounds"] += 1
                return active > 0
            t0 = time.perf_counter()
            k0 = self.sampler.kernel_calls
            try:
                batches = self.sampler.sample([r for r, _ in pending], self.features)
            except MnmgError as e:  # raised on every rank by agreement: fail these requests
                for _, f in pending:
                    f.set_exception(e)
                return True
            except BaseException as e:  # a broken collective: this round's callers must not
                err = ServiceError("a sampling round failed", f"cause: {e!r}",  # wait forever
                                   "check the first error in the log on every rank")
                for _, f in pending:
                    f.set_exception(err)
                raise
            for (_, f), b in zip(pending, batches, strict=True):
                f.set_result(b)
            st = self._stats
            st["rounds"] += 1
            st["requests"] += len(pending)
            st["hops"] += self.sampler.kernel_calls - k0
            st["t_round"] += time.perf_counter() - t0
            return True

    def _serve(self) -> None:
        try:
            while True:
                if self._q.empty() and not self._closing.is_set():
                    time.sleep(self._idle)
                if not self.run_round():
                    break
        except BaseException as e:  # a broken collective: fail every waiter, never hang them
            log.exception("sampling service failed")
            self._failed = e
            self._fail_pending(e)

    def _fail_pending(self, cause: BaseException) -> None:
        err = ServiceError("the sampling service thread failed", f"cause: {cause!r}",
                           "check the first error in the log on every rank")
        while True:
            try:
                _, f = self._q.get_nowait()
            except queue.Empty:
                return
            if not f.done():
                f.set_exception(err)

    def shutdown(self, timeout: float | None = None) -> None:
        """Collective: stop after every rank's pending requests are served."""
        if self._closed:
            return
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise ServiceError("the sampling service did not stop in time",
                                   "another rank may not have called shutdown()",
                                   "call shutdown() on every rank")
        else:
            while self.run_round():
                pass
        if self._failed is None:
            # every rank has left its last round before anyone may tear the group down
            dist.barrier(group=self.group)
        self._closed = True
        if self._failed is not None:
            raise ServiceError("the sampling service failed", f"cause: {self._failed!r}",
                               "see the log of every rank")

    def __enter__(self) -> SamplingService:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # -- stats -----------------------------------------------------------------------------------
    def stats(self) -> dict:
        """Plain-dict statistics: rounds, requests, merging, kernel calls, bytes, times."""
        st = dict(self._stats)
        st["requests_per_round"] = st["requests"] / st["rounds"] if st["rounds"] else 0.0
        st["kernel_calls"] = self.sampler.kernel_calls
        st["kernel_edges"] = self.sampler.kernel_edges
        st["bytes_exchanged"] = self.sampler.ex.bytes_sent
        st["exchange_calls"] = self.sampler.ex.calls
        st["t_kernel"] = self.sampler.t_kernel
        st["t_exchange"] = self.sampler.ex.t_exchange
        return st

