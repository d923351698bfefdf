"""The counter-based RNG of the kernels: :mod:`mnmg_sampler.rng`, under the name the kernels,
the samplers and the docs use. It lives below every layer because the graph generators draw
from it too and imports run graph -> ops.
"""

from __future__ import annotations

from ..rng import (  # noqa: F401  re-exported
    GOLDEN,
    INV53,
    M1,
    M2,
    RNG_FUNCTIONS,
    S11,
    S27,
    S30,
    S31,
    S32,
    _mix64_int,
    bounded,
    compile_rng,
    draw,
    mix64,
    request_key,
    stream_base,
    unit,
)
