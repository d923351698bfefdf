"""``import dgl`` for the DGL peer scripts (``dgl_*_peer.py``), which a peer venv's Python runs
as plain scripts: this module imports nothing of mnmg_sampler, so they load it as a sibling
file."""

import sys
import types


def import_dgl():
    """The ``dgl`` module. DGL 2.1 loads GraphBolt's native library (built only for older torch)
    on ``import dgl``; the classic samplers do not use it, so a placeholder module stands in for
    it."""

    class _Placeholder(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {})

    sys.modules.setdefault("dgl.graphbolt", _Placeholder("dgl.graphbolt"))
    import dgl

    return dgl
