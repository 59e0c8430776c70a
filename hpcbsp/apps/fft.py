"""Parallel radix-2 FFT of length n = 2^m in the cyclic distribution (Bisseling, *Parallel
Scientific Computation*, ch. 3; new code, the book is the reference for the algorithm only).

    mpiexec -n P python -m hpcbsp.apps.fft [--n N] [--repeats R] [--seed S] [--ledger PATH]
                                           [--json] [--quiet]

Input and output are distributed cyclically over p ranks (:class:`~hpcbsp.runtime.api.partition.Cyclic`):
rank s holds ``x[s::p]`` and ends with ``y[s::p]``, ``y = DFT(x)``.  With ``n/p = m'``:

1. *local stages* (work): rank s transforms its cyclic part with the radix-2 FFT of length m'
   (local bit reversal, then log2 m' butterfly stages), giving ``Z_s[k1] = sum_j x[s + j p]
   w_{m'}^{j k1}``, and multiplies by the twiddles ``w_n^{s k1}``.  These are the first log2 m'
   stages of the sequential radix-2 FFT, local because the cyclic distribution puts every
   butterfly pair of those stages on one rank.
2. ``fft:redistribute`` (one superstep): rank s puts ``Z_s[k1]``, k1 = r mod p, to rank r, which
   then holds, for each of its n/p^2 values of k1, the p values of all ranks.
   h-relation: ``(p-1) n/p^2`` complex values (16 bytes each) out of and into every rank, p - 1
   messages.
3. *remote stages, now local* (work): rank r does n/p^2 radix-2 FFTs of length p (the last
   log2 p butterfly stages): ``y[k1 + m' k2] = sum_s (w_n^{s k1} Z_s[k1]) w_p^{s k2}``.  As p
   divides m' (p^2 <= n), every output index k1 + m' k2 is = r mod p: the result is in the cyclic
   distribution again.

So p must be a power of two with p^2 <= n (one redistribution superstep; Bisseling's
group-cyclic scheme, which lifts p^2 <= n with more supersteps, is not implemented).  On any
other number of ranks the program runs on the largest such p (a ``split`` sub-computer) and says
so; the other ranks hold no data.  The oracle is ``numpy.fft.fft``; ``--repeats R`` runs R
transforms (R redistribution supersteps) for the cost model: ``--ledger run.json``, then
``hpcbsp-cost ledger run.json --profile PROFILE.json``.  ``--json`` prints one JSON object
(``n``, ``ranks``, ``ranks_used``, ``transforms``, ``max_error``, ``max_abs``, ``ok``) instead
of the ledger and the check; a long run prints progress lines on stderr (``--quiet``: none).
"""
from __future__ import annotations

import json
import sys

import numpy as np

from ..runtime import BSP
from ..runtime.superstep.ledgersummary import gather_summary
from ..runtime.api.partition import Cyclic
from ..util.args.checks import check_memory, check_outputs, ledger_output
from ..util.args.parser import OneLineParser
from ..util.args.vocabulary import add_common_options, add_n, add_repeats
from ..util.progress import Progress


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def bit_reverse_permutation(length: int) -> np.ndarray:
    """Indices ``rev(j)`` for j < length (a power of two): j's log2(length) bits reversed."""
    bits = length.bit_length() - 1
    j = np.arange(length, dtype=np.int64)
    rev = np.zeros(length, dtype=np.int64)
    for b in range(bits):
        rev |= ((j >> b) & 1) << (bits - 1 - b)
    return rev


def fft_radix2(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Radix-2 decimation-in-time FFT along ``axis`` (length a power of two), vectorised over the
    other axes: bit reversal, then log2(L) stages of butterflies ``(a + w b, a - w b)``."""
    a = np.moveaxis(np.asarray(x, dtype=np.complex128), axis, -1)
    length = a.shape[-1]
    if not is_power_of_two(length):
        raise ValueError(f"fft_radix2: length {length} is not a power of two")
    a = a[..., bit_reverse_permutation(length)]
    batch = a.shape[:-1]
    size = 2
    while size <= length:
        half = size // 2
        w = np.exp(-2j * np.pi * np.arange(half) / size)
        blocks = a.reshape(*batch, length // size, size)
        top, bottom = blocks[..., :half], blocks[..., half:] * w
        a = np.concatenate([top + bottom, top - bottom], axis=-1).reshape(*batch, length)
        size *= 2
    return np.moveaxis(a, -1, axis)


def usable_ranks(n: int, nprocs: int) -> int:
    """The largest power of two p <= nprocs with p^2 <= n: the ranks the FFT runs on."""
    p = 1
    while 2 * p <= nprocs and (2 * p) ** 2 <= n:
        p *= 2
    return p


class ParallelFFT:
    """The parallel FFT of length n on this BSP context, with its buffer registered once.

    Parameters
    ----------
    bsp : BSP
        The context (collective); ``bsp.nprocs`` must be a power of two with ``nprocs**2 <= n``.
    n : int
        The transform length, a power of two.
    """

    def __init__(self, bsp: BSP, n: int):
        p, me = bsp.nprocs, bsp.pid
        if not is_power_of_two(n) or not is_power_of_two(p) or p * p > n:
            raise ValueError(f"rank {me}: fft needs n and p powers of two with p^2 <= n, got n = {n}, "
                             f"p = {p}")
        self.bsp, self.n, self.p = bsp, n, p
        self.m_local = n // p
        self.per = self.m_local // p                     # values of k1 per destination
        self.buf = bsp.coarray(p * self.per, np.complex128, name="fft:redistribute", scratch=True)
        self.twiddle = np.exp(-2j * np.pi * me * np.arange(self.m_local) / n)   # w_n^{s k1}

    def __call__(self, x_local: np.ndarray) -> np.ndarray:
        """``DFT(x)`` in the cyclic distribution: rank s passes ``x[s::p]`` and gets ``y[s::p]``.

        One superstep, ``fft:redistribute``; h-relation ``(p-1) n/p^2 * 16`` bytes out of and into
        every rank.
        """
        p, me, per = self.p, self.bsp.pid, self.per
        if x_local.shape != (self.m_local,):
            raise ValueError(f"rank {me}: cyclic part of shape {x_local.shape}, expected ({self.m_local},)")
        z = fft_radix2(x_local) * self.twiddle           # local stages, then twiddles
        for r in range(p):
            self.buf.put(r, z[r::p], offset=me * per)    # Z_s[k1], k1 = r (mod p), to rank r
        self.bsp.sync("fft:redistribute")
        v = self.buf.local.reshape(p, per)               # v[s, i] = twiddled Z_s[me + i p]
        return fft_radix2(v, axis=0).reshape(-1)         # y[me + i p + m' k2] at k2 * per + i


def fft(bsp: BSP, x_local: np.ndarray, n: int) -> np.ndarray:
    """One parallel FFT (see :class:`ParallelFFT`): rank s passes ``x[s::p]``, gets ``y[s::p]``."""
    return ParallelFFT(bsp, n)(x_local)


def random_signal(n: int, seed: int = 0) -> np.ndarray:
    """A reproducible complex signal (the same on every rank)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) + 1j * rng.standard_normal(n)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.apps.fft",
                           description="Parallel radix-2 FFT in the cyclic distribution, one "
                                       "redistribution superstep; checks against numpy.fft.fft and "
                                       "prints the superstep ledger.")
    add_n(parser, "transform length, a power of two >= 2", per="in total", default=1024)
    add_repeats(parser, "transforms to run, one redistribution superstep each", default=1, old=("--repeat",))
    add_common_options(parser, seed_help="seed of the random signal")
    args = parser.parse_args(argv)
    if args.n < 2 or not is_power_of_two(args.n):
        parser.error(f"--n must be a power of two >= 2, got {args.n}")
    check_outputs(parser, [ledger_output(args.ledger)])
    # Every rank draws the whole signal; the check transforms it once more (complex128).
    check_memory(parser, 4 * 16.0 * args.n, f"--n {args.n}", "use a smaller --n")
    ok = True
    with BSP() as world:
        p = usable_ranks(args.n, world.nprocs)
        if world.pid == 0 and p < world.nprocs and not args.json:
            idle = f"rank {p} holds" if p == world.nprocs - 1 else f"ranks {p}..{world.nprocs - 1} hold"
            print(f"fft: running on {p} of {world.nprocs} ranks (the radix-2 FFT needs a power of two "
                  f"p with p^2 <= n = {args.n}); {idle} no data")
        bsp = world.split(0 if world.pid < p else None) if p < world.nprocs else world
        if bsp is not None:
            if args.ledger:  # every superstep's record, in files as the run goes (save merges them)
                bsp.ledger.stream_for(args.ledger)
            x = random_signal(args.n, args.seed)
            part = Cyclic(args.n, p)
            mine = part.global_indices(bsp.pid)
            transform = ParallelFFT(bsp, args.n)
            show = Progress("fft", args.repeats, enabled=not args.quiet and bsp.pid == 0, unit="transform")
            for done in range(args.repeats):
                y = transform(x[mine])
                show(done + 1)
            summary = gather_summary(bsp.ledger)  # (the window, and totals of every superstep)
            if args.ledger:
                bsp.ledger.save(args.ledger)
            expect = np.fft.fft(x)
            scale = float(np.max(np.abs(expect)))
            err = float(bsp.allreduce(float(np.max(np.abs(y - expect[mine]), initial=0.0)), op="max"))
            ok = bool(err <= 1e-12 * scale * max(np.log2(args.n), 1))
            if bsp.pid == 0 and args.json:
                print(json.dumps({"n": args.n, "ranks": world.nprocs, "ranks_used": p, "transforms": args.repeats,
                                  "max_error": err, "max_abs": scale, "ok": ok, "ledger": args.ledger}))
            elif bsp.pid == 0:
                print(summary.text() if summary is not None else "")
                print(f"fft: n = {args.n} on {p} rank(s), {args.repeats} transform(s); max |y - numpy.fft.fft| "
                      f"= {err:.2e} (max |y| = {scale:.3g})  {'OK' if ok else 'FAILED'}")
            if bsp is not world:
                bsp.close()
        ok = bool(world.allreduce(int(not ok), op="max") == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
