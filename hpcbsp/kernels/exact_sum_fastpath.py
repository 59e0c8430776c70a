"""Testing hooks: the exact sum's fast path looked at directly (not for programs).

The exact sum (:mod:`.exact_sum`) chooses per block of :data:`BLOCK_VALUES` values between
error-free extraction (``kernels/exactsum_blocks.h``, the fast path) and integer bins, and says
whether the fast path may run through :func:`.exact_sum.exact_sum_fast_path_enabled`.  Both are
exact, so a program never needs more.  The tests need more: the fast path's answer for one
block, to compare with exact rationals; its known-answer test's verdict; and the SSE control
register set to flush-to-zero, denormals-are-zero or another rounding mode, to check that the
path stands aside there.  These are those hooks, the compiled extension's own functions.
"""
from __future__ import annotations

from ._extensions import MODULES

_XS = MODULES["_exactsum"]

#: Whether the fast path was compiled in (a GCC-compatible compiler, no fast-math flags).
COMPILED_IN: bool = bool(_XS.XS_COMPILED_IN)
#: The values of one block (the unit in which the fast path accepts or refuses).
BLOCK_VALUES: int = int(_XS.XS_BLOCK_VALUES)
#: The second extraction level's offset: ``extract_block``'s ``lo`` weighs ``2**(pos - LEVEL_SHIFT - 1074)``.
LEVEL_SHIFT: int = int(_XS.XS_SHIFT)

#: ``extract_block(x)``: for a C-contiguous float64 block of at most :data:`BLOCK_VALUES` values,
#: ``(hi, lo, pos)`` with the exact sum ``hi * 2**(pos - 1074) + lo * 2**(pos - LEVEL_SHIFT - 1074)``,
#: or None where the fast path refuses the block.
extract_block = _XS.extract_block
#: ``ready()``: blocks may take the fast path in this thread now (compiled in, known-answer test
#: passed, round-to-nearest, no flush-to-zero, no denormals-are-zero).
ready = _XS.extraction_ready
#: ``self_test_passed()``: the known-answer test's verdict (run now if it has not run).
self_test_passed = _XS.extraction_self_test_passed
#: ``fp_env_ready()``: this thread's floating-point environment allows the fast path (the
#: per-call probe alone, without the known-answer test).
fp_env_ready = _XS.fp_env_ready
#: ``set_ftz_daz(ftz, daz)``: set the SSE flush-to-zero and denormals-are-zero flags; returns the
#: register's previous value for :func:`restore_fp_flags`, or None where the CPU has no such register.
set_ftz_daz = _XS.set_ftz_daz
#: ``restore_fp_flags(token)``: write a value into the SSE control register (the token
#: ``set_ftz_daz`` returned, or that token with other rounding bits).
restore_fp_flags = _XS.restore_fp_flags
