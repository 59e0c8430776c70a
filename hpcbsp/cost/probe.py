"""``hpcbsp-cost probe``: measure the BSP machine parameters r, g and l on the BSP runtime.

The method is bspbench's (Bisseling, BSPedupack): r from a DAXPY loop; g and l from full
h-relations of increasing h, each timed over several repeats, and a least-squares fit of
T(h) = l + g·h.  Two message-size regimes are probed:

* ``words``: every rank puts h single 8-byte words, spread evenly over the other p − 1 ranks,
  so every rank sends and receives exactly h words (g includes the per-message cost);
* ``blocks``: every rank puts one block of b words to each other rank (h = (p − 1)·b words):
  few large messages, so g approaches the inverse bandwidth.

Times are rank 0's wall clock (every sync ends together), T(h) is the median over repeats and
the spread is the min-max range; intervals of g and l come from a bootstrap over the repeats.
h is counted in bytes, as the ledger counts it.
"""
from __future__ import annotations

import platform
import time
from typing import Any, Callable, TextIO

import numpy as np

from ..util.mpiflavour import library_name
from .errors import CostInputError
from .modelfile import provenance
from .profile import FORMAT

WORD = 8  # bytes of one float64 word


def measure_rate(n: int = 4096, iterations: int = 200) -> float:
    """Local compute rate r in flop/s of a numpy DAXPY (y += a·x) of length n."""
    x = np.random.default_rng(0).standard_normal(n)
    y = np.zeros(n)
    alpha = 1.0 / 3.0
    np.multiply(x, alpha, out=y)  # warm the caches and numpy's dispatch
    t0 = time.perf_counter()
    for _ in range(iterations):
        y += alpha * x
    elapsed = time.perf_counter() - t0
    return 2.0 * n * iterations / elapsed


def _timed(bsp: Any, repeats: int, issue: Callable[[], None], label: str) -> list[float]:
    """Rank 0's times of ``repeats`` supersteps of (issue the puts; sync), after one warm-up."""
    issue()
    bsp.sync(label)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        issue()
        bsp.sync(label)
        times.append(time.perf_counter() - t0)
    return times


def fit_line(h: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(g, l) of t = l + g·h minimising the *relative* squared error, Σ ((l + g·h − t) / t)²;
    g clipped at 0 (noise on a flat line: then the best constant in that sense).

    Relative, because the probed h span four orders of magnitude: an absolute fit is decided by
    the largest blocks and leaves l wherever their line crosses h = 0 (174 µs once, where an
    8-byte superstep took 20 µs), which mispredicts every small superstep by several times.
    Weighting each point by 1/t gives every measured size the same say, and the ledger's
    comparison judges predictions by relative error too.
    """
    weight = 1.0 / t
    design = np.column_stack([h * weight, weight])
    g, l = np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0]
    if g < 0:
        g, l = 0.0, float(np.sum(weight) / np.sum(weight ** 2))
    return float(g), float(l)


def summarise_regime(name: str, message_bytes: tuple[float, float], h_bytes: list[float],
                     times: list[list[float]], n_boot: int = 200, seed: int = 0) -> dict[str, Any]:
    """Fit one regime and bootstrap its g and l over the repeats."""
    h = np.asarray(h_bytes, dtype=float)
    reps = [np.asarray(t, dtype=float) for t in times]
    med = np.array([np.median(t) for t in reps])
    g, l = fit_line(h, med)
    rng = np.random.default_rng(seed)
    boot = np.array([fit_line(h, np.array([np.median(rng.choice(t, t.size)) for t in reps]))
                     for _ in range(n_boot)])
    pred = l + g * h
    return {
        "name": name, "message_bytes": list(message_bytes), "g": g, "l": l,
        "g_interval": np.percentile(boot[:, 0], [2.5, 97.5]).tolist(),
        "l_interval": np.percentile(boot[:, 1], [2.5, 97.5]).tolist(),
        "fit_rel_rmse": float(np.sqrt(np.mean(((pred - med) / med) ** 2))),
        "h_bytes": h.tolist(), "seconds": med.tolist(),
        "spread": [[float(t.min()), float(t.max())] for t in reps],
    }


def probe(bsp: Any, *, max_h: int = 256, repeats: int = 20, max_block_words: int = 1 << 17,
          progress: TextIO | None = None) -> dict[str, Any] | None:
    """Measure r, g and l on this BSP context (collective); return the profile on rank 0.

    Superstep h-relations: ``probe:empty`` and ``probe:local`` none (``probe:local``: one word
    put by every rank to itself); ``probe:words`` h·8 bytes and h messages out of and into every
    rank; ``probe:blocks`` (p − 1)·b·8 bytes and p − 1 messages out of and into every rank.
    """
    p, me = bsp.nprocs, bsp.pid
    if p < 2:
        raise CostInputError("the probe needs at least 2 ranks: mpiexec -n 2 hpcbsp-cost probe ...")

    def say(text: str) -> None:
        if progress is not None and me == 0:
            progress.write(f"probe: {text}\n")
            progress.flush()

    say(f"compute rate r on {p} ranks")
    r = measure_rate()
    r_all = [bsp.allreduce(r, op="min"), bsp.allreduce(r, op="max"), bsp.allreduce(r, op="sum") / p]

    say("empty syncs (l with no data)")
    empty = _timed(bsp, repeats, lambda: None, "probe:empty")

    say("local syncs (one word put to this rank itself: the exchange runs, no message moves)")
    own = bsp.coarray(1, dtype=np.float64, name="probe:local")
    word = np.ones(1)
    local = _timed(bsp, repeats, lambda: own.put(me, word), "probe:local")

    # words: the i-th word goes to rank (me + 1 + i mod (p-1)) mod p at a slot no other word uses.
    words = bsp.coarray(2 * max_h + p, dtype=np.float64, name="probe:words")
    src = np.arange(max(max_h, 1), dtype=np.float64)
    hs = sorted({int(h) for h in np.linspace(p, max(max_h, p), 8)})
    word_times = []
    for h in hs:
        say(f"words h = {h} ({repeats} repeats)")
        dests = [(me + 1 + i % (p - 1)) % p for i in range(h)]
        offsets = [me + (i // (p - 1)) * p for i in range(h)]

        def issue(h: int = h, dests: list[int] = dests, offsets: list[int] = offsets) -> None:
            for i in range(h):
                words.put(dests[i], src[i:i + 1], offset=offsets[i])

        word_times.append(_timed(bsp, repeats, issue, "probe:words"))

    # blocks: one block of b words to every other rank, into a slot reserved for the sender.
    blocks = bsp.coarray((p - 1) * max_block_words, dtype=np.float64, name="probe:blocks")
    block_src = np.ones(max_block_words)
    bs = sorted({int(b) for b in np.geomspace(64, max_block_words, 7)})
    block_times = []
    for b in bs:
        say(f"blocks of {b * WORD} bytes to each of {p - 1} rank(s) ({repeats} repeats)")

        def issue_blocks(b: int = b) -> None:
            for q in range(p):
                if q != me:
                    blocks.put(q, block_src[:b], offset=((me - q - 1) % p) * b)

        block_times.append(_timed(bsp, repeats, issue_blocks, "probe:blocks"))

    if me != 0:
        return None
    from mpi4py import MPI

    regimes = [
        summarise_regime("words", (WORD, WORD), [h * WORD for h in hs], word_times),
        summarise_regime("blocks", (bs[0] * WORD, bs[-1] * WORD), [(p - 1) * b * WORD for b in bs], block_times),
    ]
    return {
        "format": FORMAT,
        "nprocs": p,
        "r_flops": r_all[2],
        "r_spread": [r_all[0], r_all[1]],
        "l_empty": float(np.median(empty)),
        "l_empty_spread": [float(min(empty)), float(max(empty))],
        "l_local": float(np.median(local)),
        "l_local_spread": [float(min(local)), float(max(local))],
        "repeats": repeats,
        "regimes": regimes,
        **provenance(source="probe", mpi_library=library_name(MPI.Get_library_version()),
                     mpi4py=__import__("mpi4py").__version__, processor=platform.processor()),
    }


def run_probe(*, max_h: int | None = None, repeats: int | None = None, quick: bool = False,
              output: str | None = None, progress: TextIO | None = None) -> dict[str, Any] | None:
    """Run the probe on all ranks of MPI.COMM_WORLD; write and return the profile on rank 0."""
    import json

    import hpcbsp

    max_h = max_h or (64 if quick else 256)
    repeats = repeats or (5 if quick else 20)
    block_words = 1 << 14 if quick else 1 << 17
    profile = hpcbsp.run(probe, max_h=max_h, repeats=repeats, max_block_words=block_words, progress=progress)
    if profile is not None and output:
        with open(output, "w") as fh:
            json.dump(profile, fh, indent=1)
            fh.write("\n")
    return profile


def format_profile(profile: dict[str, Any]) -> str:
    """The profile for people: r, l_empty, l_local and g, l per regime with their intervals."""
    lines = [f"BSP machine profile: p = {profile['nprocs']}, r = {profile['r_flops'] / 1e6:.0f} Mflop/s "
             f"(ranks {profile['r_spread'][0] / 1e6:.0f}-{profile['r_spread'][1] / 1e6:.0f}), "
             f"empty sync {profile['l_empty'] * 1e6:.1f} us"
             + (f", local sync {profile['l_local'] * 1e6:.1f} us" if profile.get("l_local") is not None else ""),
             f"  {'regime':<7} {'message bytes':>16} {'g [ns/byte]':>12} {'95% interval':>20} "
             f"{'l [us]':>9} {'95% interval':>18} {'fit rel RMSE':>12}"]
    for reg in profile["regimes"]:
        lo, hi = reg["message_bytes"]
        gi, li = reg["g_interval"], reg["l_interval"]
        lines.append(f"  {reg['name']:<7} {f'{lo:.0f}-{hi:.0f}':>16} {reg['g'] * 1e9:>12.3f} "
                     f"{f'[{gi[0] * 1e9:.3f}, {gi[1] * 1e9:.3f}]':>20} {reg['l'] * 1e6:>9.1f} "
                     f"{f'[{li[0] * 1e6:.1f}, {li[1] * 1e6:.1f}]':>18} {reg['fit_rel_rmse']:>12.3f}")
    lines.append(f"  {profile.get('mpi_library', '')}; host {profile.get('host', '?')}, {profile.get('date', '')}")
    return "\n".join(lines)
