"""The allocation guard: estimates above what the process can allocate raise before allocating."""

import subprocess
import sys

import pytest

from mnmg_sampler.errors import MemoryBudgetError
from mnmg_sampler.system.host_limits import available_bytes, check_allocation, format_bytes


def test_format_bytes_units():
    assert format_bytes(512) == "512 B"
    assert format_bytes(74.5 * 2**30) == "74.5 GiB"
    assert format_bytes(8e12) == "7.3 TiB"


def test_huge_estimate_is_refused_with_what_and_fix():
    with pytest.raises(MemoryBudgetError) as err:
        check_allocation("a CSR of 10**12 nodes", 8e12, "renumber the ids")
    text = str(err.value)
    assert "a CSR of 10**12 nodes needs 7.3 TiB" in text and "Fix: renumber the ids." in text


def test_small_estimate_passes():
    check_allocation("a small array", 1024, "nothing")


def test_address_space_limit_wins_over_free_ram():
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30));"
            "from mnmg_sampler.system.host_limits import available_bytes; print(available_bytes())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    limited = int(out.stdout)
    assert limited < 4 << 30
    assert limited <= available_bytes()
