"""Start-up verification: full, sampled and off checks of a rank's own files, and the stamp."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mnmg_sampler.errors import PartitionError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import (
    MANIFEST,
    SAMPLE_BLOCK,
    SAMPLE_BLOCKS,
    load_partition,
    verify_part,
)
from mnmg_sampler.graph.rmat import rmat_graph


@pytest.fixture
def parts(tmp_path):
    g = rmat_graph(14, 16, seed=1)  # 262k edges: indices of each part about 1 MiB
    return partition(g, 2, "range", tmp_path / "p")


def _manifest(d):
    return json.loads((d / MANIFEST).read_text())


def _flip(path, offset):
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a later mtime, surely


def test_large_files_carry_sampled_block_checksums(parts):
    files = _manifest(parts)["files"]
    e = files["part1/indices.npy"]
    assert e["bytes"] > SAMPLE_BLOCKS * SAMPLE_BLOCK and len(e["samples"]) == SAMPLE_BLOCKS
    small = files["part1/indptr.npy"]
    assert small["bytes"] <= SAMPLE_BLOCKS * SAMPLE_BLOCK and "samples" not in small


def test_stamp_skips_the_second_read_and_changes_reverify(parts):
    m = _manifest(parts)
    assert verify_part(parts, m, 1, "full") == "full"
    assert (parts / "part1" / ".verified.json").is_file()
    assert verify_part(parts, m, 1, "full") == "stamped"
    assert verify_part(parts, m, 1, "sampled") == "stamped"  # a full check covers sampled
    path = parts / "part1" / "indices.npy"
    size = path.stat().st_size
    _flip(path, size // 2 + 7)  # between sampled blocks, new mtime
    with pytest.raises(PartitionError, match="indices.npy has checksum"):
        verify_part(parts, m, 1, "full")


def test_sampled_reads_blocks_and_catches_damage_in_them(parts):
    m = _manifest(parts)
    path = parts / "part1" / "indices.npy"
    size = path.stat().st_size
    step = (size - SAMPLE_BLOCK) // (SAMPLE_BLOCKS - 1)
    assert step > SAMPLE_BLOCK + 2
    _flip(path, 3 * step + SAMPLE_BLOCK + 1)  # between sampled blocks 3 and 4
    assert verify_part(parts, m, 1, "sampled") == "sampled"  # not seen: it only samples
    with pytest.raises(PartitionError, match="checksum"):
        load_partition(parts, 1, verify="full")
    _flip(path, size - 10)  # inside the last block
    with pytest.raises(PartitionError, match="sampled blocks"):
        load_partition(parts, 1, verify="sampled")


def test_each_rank_reads_only_its_own_files(parts):
    m = _manifest(parts)
    _flip(parts / "part0" / "indices.npy", 100)
    assert verify_part(parts, m, 1, "full") == "full"  # rank 1 never reads part 0
    load_partition(parts, 1, verify="full")
    with pytest.raises(PartitionError, match="part0"):
        load_partition(parts, 0, verify="full")


def test_off_and_auto(parts):
    m = _manifest(parts)
    _flip(parts / "part1" / "edge_ids.npy", 200)
    assert verify_part(parts, m, 1, "off") == "off"
    assert load_partition(parts, 1, verify=False).num_local_edges > 0
    with pytest.raises(PartitionError):
        verify_part(parts, m, 1, "auto")  # small part: auto is full
    with pytest.raises(PartitionError, match="verification mode"):
        load_partition(parts, 1, verify="most")


def test_unwritable_directory_still_loads(parts, monkeypatch):
    import pathlib

    def refuse(self, *a, **k):
        raise PermissionError("read-only")

    monkeypatch.setattr(pathlib.Path, "write_text", refuse)
    assert verify_part(parts, _manifest(parts), 0, "full") == "full"
    assert not (parts / "part0" / ".verified.json").exists()
    np.testing.assert_array_equal(load_partition(parts, 0).indptr[:1], [0])


def test_stamped_directory_can_still_be_overwritten(parts):
    from mnmg_sampler.graph.partition import partition
    from mnmg_sampler.graph.partition_io import check_replaceable
    from mnmg_sampler.graph.rmat import rmat_graph

    load_partition(parts, 0, verify="full")
    assert (parts / "part0" / ".verified.json").is_file()
    check_replaceable(parts)  # the stamp is not a foreign file
    partition(rmat_graph(6, 4), 2, "random", parts, overwrite=True)
    assert not (parts / "part0" / ".verified.json").exists()
