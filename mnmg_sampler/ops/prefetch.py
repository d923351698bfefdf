"""A software prefetch for the numba CPU kernels: ``prefetch(a, i)`` asks the CPU to start
loading the cache line of ``a[i]`` and returns at once.

Why: a loop whose loads depend on other random loads (a search in a CSR segment found through
``indptr``) keeps few cache misses in flight; prefetching a few iterations ahead overlaps them
(``ops.typed``'s time search, measured 1.6x faster). A prefetch never faults and changes no
value, so results do not depend on it; ``i`` need not be in bounds.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["prefetch"]

_I32 = ir.IntType(32)


@intrinsic
def prefetch(typingctx, arr, idx):
    """Prefetch the cache line of ``arr[idx]`` (1-D array) for reading, into every cache
    level (LLVM's ``llvm.prefetch``: read, locality 3, data cache)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        # the element's address, computed without a bounds check (a prefetch never faults)
        ptr = builder.gep(ary.data, [args[1]])
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(_I32, 0), ir.Constant(_I32, 3),
                          ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return sig, codegen
