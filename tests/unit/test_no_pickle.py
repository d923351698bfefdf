"""No file can run code and nothing crosses ranks pickled: a guard over the package's source."""

from __future__ import annotations

from pathlib import Path

import mnmg_sampler

FORBIDDEN = ("weights_only=False", "import pickle", "from pickle", "all_gather_object",
             "broadcast_object_list", "scatter_object_list", "dist.gather_object",
             "send_object_list", "recv_object_list", "allow_pickle=True")


def _lines():
    root = Path(mnmg_sampler.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            yield f"{path.relative_to(root)}:{no}", line


def test_no_pickle_in_the_package():
    hits = [f"{where}: {word}" for where, line in _lines() for word in FORBIDDEN if word in line]
    assert hits == [], "\n".join(hits)


def test_every_torch_load_is_weights_only():
    loads = [(where, line) for where, line in _lines() if "torch.load(" in line]
    assert loads, "the checkpoint reader calls torch.load"
    assert [w for w, line in loads if "weights_only=True" not in line] == []
