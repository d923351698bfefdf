"""Host malloc tuning (``mnmg_sampler/system/host_malloc.py``): a sampler's process reuses freed
multi-MB buffers instead of faulting fresh pages in for every batch. Each case runs in a fresh
interpreter, because mallopt settings last for the whole process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")

# A hop-like pattern that glibc's dynamic thresholds do not settle on: one 8 MiB buffer freed
# (the mmap threshold rises to 8 MiB, the trim threshold to 16 MiB), then five 6 MiB buffers
# written and freed per "batch": 30 MiB of free heap top is more than 16 MiB, so glibc trims
# it and the next batch faults every page in again.
_CHILD = """
import json, resource, numpy as np
from mnmg_sampler.system.host_malloc import malloc_state
from mnmg_sampler.sampling.sampler import MultiHopSampler
MultiHopSampler(lambda h: None, 10)  # a sampler tunes malloc when it is built
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(1 << 20)
per_batch = []
for _ in range(6):
    f0 = faults()
    bufs = [np.ones(6 << 17) for _ in range(5)]
    del bufs
    per_batch.append(faults() - f0)
print(json.dumps([malloc_state(), per_batch]))
"""


def _run(env_value: str | None) -> tuple[str, list[int]]:
    env = dict(os.environ)
    env.pop("MNMG_SAMPLER_MALLOC", None)
    if env_value is not None:
        env["MNMG_SAMPLER_MALLOC"] = env_value
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    state, per_batch = json.loads(out.stdout.strip().splitlines()[-1])
    return state, per_batch


def test_a_sampler_process_reuses_freed_buffers():
    state, per_batch = _run(None)
    assert state == "tuned"
    # 30 MiB per batch is ~7,700 pages: after the first batch, next to none are new
    assert max(per_batch[1:]) < 100, per_batch


def test_default_leaves_glibc_as_it_is_and_the_pattern_faults_there():
    state, per_batch = _run("default")
    assert state == "default"
    assert min(per_batch[1:]) > 1000, per_batch  # the control: what the tuning removes
