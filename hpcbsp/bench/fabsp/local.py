"""The sections of ``python -m hpcbsp.bench fabsp`` on the ranks alone: throughput, overlap,
and memory by routing (see the package's docstring for what each measures)."""
from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np

from ...apps.irregular.histogram import oracle as histogram_oracle
from ...apps.irregular.histogram import run_histogram, updates_of
from ...apps.irregular.index_gather import run_index_gather
from ...apps.irregular.report import Outcome, timed
from ...apps.irregular.rma import issuer
from ...fabsp.engine import Engine
from ...fabsp.routing import ROUTINGS, buffers_per_rank, grid_dims
from ...kernels import scatter_add
from ...runtime import BSP
from .common import BALE_TUNED, HIST_TARGET_BSP, TARGET_RMA, TARGET_ROUTED, best, say


def throughput(bsp: BSP, args: argparse.Namespace) -> bool:
    ok_all = True
    table = args.table
    apps: tuple[tuple[str, Callable[..., Outcome]], ...] = (("histogram", run_histogram),
                                                            ("index_gather", run_index_gather))
    for app, runner in apps:
        rates = {}
        for mode in ("fabsp", "bsp", "naive", "rma"):
            n = {"naive": args.naive_updates, "rma": args.rma_updates}.get(mode, args.updates)

            def once(check: bool, mode: str = mode, n: int = n, runner: Callable[..., Outcome] = runner) -> Outcome:
                return runner(bsp, mode, n, table, args.seed, args.chunk, check)

            say(bsp, f"  [{app} {mode}] {n:,} per rank x {args.repeat} ...")
            seconds, n, ok = best(bsp, args.repeat, once)
            ok_all = ok_all and ok
            rates[mode] = n / seconds
            say(bsp, f"  {app:<13} {mode:<6} {n:>10,} per rank  {seconds:8.3f} s  "
                      f"{rates[mode]:>14,.0f} per s per rank  {'' if ok else 'CHECK FAILED'}"
                      f"{'  (issued from ' + issuer() + ')' if mode == 'rma' else ''}")
        vs_bsp, vs_naive = rates["fabsp"] / rates["bsp"], rates["fabsp"] / rates["naive"]
        vs_rma = rates["fabsp"] / rates["rma"]
        say(bsp, f"  {app}: FA-BSP / BSP = {vs_bsp:.2f}x (target >= {HIST_TARGET_BSP:.1f}x: "
                  f"{'met' if vs_bsp >= HIST_TARGET_BSP else 'NOT met'}),  FA-BSP / rma = "
                  f"{vs_rma:,.1f}x (target >= {TARGET_RMA:.0f}x: "
                  f"{'met' if vs_rma >= TARGET_RMA else 'NOT met'}),  FA-BSP / naive = {vs_naive:,.0f}x")
        if bsp.nprocs == 2:
            vs_bale = rates["fabsp"] / BALE_TUNED[app]
            say(bsp, f"  {app}: FA-BSP / bale tuned C ({BALE_TUNED[app] / 1e6:.1f} M per s per rank, "
                      f"fixed, issue 20) = {vs_bale:.2f}x (target >= 1.0x: "
                      f"{'met' if vs_bale >= 1.0 else 'NOT met'}; the VM's speed drifts, so "
                      "docs/performance.md also records bale built and run side by side)")
    return ok_all


def _work(x: np.ndarray, rounds: int) -> float:
    """Local computation of a fixed cost (the "compute" of the overlap run)."""
    acc = 0.0
    for _ in range(rounds):
        acc += float(np.sin(x).sum())
    return acc


def auto_rounds(bsp: BSP, args: argparse.Namespace) -> int:
    """``--work-rounds 0``: sin() rounds per chunk for a compute that takes about as long as the
    FA-BSP communication alone (one run of it, then one timed round per chunk; the largest
    figure over the ranks, so every rank computes the same)."""
    n, table, chunk = args.updates, args.table, args.chunk
    owner, off = updates_of(bsp.pid, bsp.nprocs, n, table, args.seed)
    counts = np.zeros(table, dtype=np.int64)
    box = bsp.mailbox(lambda offs: scatter_add(counts, offs, 1), np.int64, name="overlap-probe")

    def comm() -> None:
        for s in range(0, n, chunk):
            box.send(owner[s:s + chunk], off[s:s + chunk])
            bsp.progress()
        bsp.sync("probe")

    t_comm = float(bsp.allreduce(timed(bsp, comm)[0], op="max"))
    x = np.linspace(0.0, 1.0, args.work_size)
    chunks = len(range(0, n, chunk))
    t0 = time.perf_counter()
    for _ in range(min(chunks, 8)):
        _work(x, 1)
    per_round = (time.perf_counter() - t0) / min(chunks, 8)
    rounds = max(1, round(t_comm / (chunks * per_round)))
    return int(bsp.allreduce(rounds, op="max"))


def overlap(bsp: BSP, args: argparse.Namespace, imbalance: int, work_rounds: int) -> bool:
    """One overlap measurement; rank 0 computes ``imbalance`` times as much as the others."""
    n, table, chunk = args.updates, args.table, args.chunk
    owner, off = updates_of(bsp.pid, bsp.nprocs, n, table, args.seed)
    x = np.linspace(0.0, 1.0, args.work_size)
    starts = range(0, n, chunk)
    rounds = work_rounds * (imbalance if bsp.pid == 0 else 1)

    def compute_only() -> None:
        for _ in starts:
            _work(x, rounds)
        bsp.sync("compute")

    def run_fabsp(with_compute: bool) -> np.ndarray:
        counts = np.zeros(table, dtype=np.int64)
        box = bsp.mailbox(lambda offs: scatter_add(counts, offs, 1), np.int64, name="overlap")

        def body() -> None:
            for s in starts:
                if with_compute:
                    _work(x, rounds)
                box.send(owner[s:s + chunk], off[s:s + chunk])
                bsp.progress()
            bsp.sync("fabsp")

        seconds, _ = timed(bsp, body)
        result[0] = seconds
        return counts

    def run_bsp() -> np.ndarray:
        counts = np.zeros(table, dtype=np.int64)
        queue = bsp.queue(np.int64, name="overlap")

        def body() -> None:
            for _ in starts:
                _work(x, rounds)
            queue.send(owner, off)
            bsp.sync("bsp")
            scatter_add(counts, queue.received(), 1)

        seconds, _ = timed(bsp, body)
        result[0] = seconds
        return counts

    result = [0.0]
    expected = histogram_oracle(bsp.pid, bsp.nprocs, n, table, args.seed)
    best = {"comp": float("inf"), "comm": float("inf"), "both": float("inf"), "bsp": float("inf")}
    ok = True
    for _ in range(args.repeat):
        t_comp, _ = timed(bsp, compute_only)
        best["comp"] = min(best["comp"], float(bsp.allreduce(t_comp, op="max")))
        for key, fn in (("comm", lambda: run_fabsp(False)), ("both", lambda: run_fabsp(True)),
                        ("bsp", run_bsp)):
            counts = fn()
            ok = ok and bool(bsp.allreduce(int(np.array_equal(counts, expected)), op="min"))
            best[key] = min(best[key], float(bsp.allreduce(result[0], op="max")))
    t_comp, t_comm, t_both, t_bsp = best["comp"], best["comm"], best["both"], best["bsp"]
    saved = t_comp + t_comm - t_both
    hidden = min(1.0, max(0.0, saved / t_comm)) if t_comm > 0 else 0.0
    hideable = min(t_comp, t_comm)
    of_hideable = min(1.0, max(0.0, saved / hideable)) if hideable > 0 else 0.0
    what = "balanced" if imbalance == 1 else f"rank 0 computes {imbalance}x as much"
    say(bsp, f"  {what}: T_comp = {t_comp:.3f} s (compute only), T_comm = {t_comm:.3f} s "
              f"(FA-BSP communication only), T_both = {t_both:.3f} s (interleaved)")
    say(bsp, f"    hidden fraction of communication = (T_comp + T_comm - T_both) / T_comm = "
              f"{hidden:.0%} (of the hideable min(T_comp, T_comm): {of_hideable:.0%});  plain BSP "
              f"(compute, then exchange) = {t_bsp:.3f} s, BSP / FA-BSP interleaved = {t_bsp / t_both:.2f}x")
    if not ok:
        say(bsp, "  CHECK FAILED: a histogram differs from the serial oracle")
    return ok


#: Rank counts of the sizing table (computed, not run).
SIZING_P = (4, 16, 64, 256, 1024, 10_000, 100_000)
#: Ranks a node in the sizing of the "node" routing (a typical many-core node's MPI ranks).
SIZING_PER_NODE = 16


def memory(bsp: BSP, args: argparse.Namespace) -> bool:
    """Mailbox memory per rank by routing: measured on these ranks, computed up to 100,000.

    The routings' runs are interleaved (direct, 2d, 3d, then again, ``--repeat`` rounds), so
    that a drift of the machine's speed touches all three alike; the ratios are of medians."""
    ok_all = True
    n = args.updates
    times: dict[str, list[float]] = {r: [] for r in ROUTINGS}
    lines: dict[str, str] = {}
    busiest: dict[str, float] = {}  # the bytes the busiest rank moved (in + out), first round
    for rnd in range(args.repeat):
        for routing in ROUTINGS:
            first = bsp.ledger.totals()
            out = run_histogram(bsp, "fabsp", n, args.table, args.seed, args.chunk, rnd == 0,
                                routing=routing)
            times[routing].append(float(bsp.allreduce(out.seconds, op="max")))
            if rnd:
                continue
            now = bsp.ledger.totals()  # (the supersteps since the mark: the difference)
            moved = now["bytes_in"] - first["bytes_in"] + now["bytes_out"] - first["bytes_out"]
            busiest[routing] = float(bsp.allreduce(moved, op="max"))
            engine = Engine.existing(bsp)
            assert engine is not None, "the histogram made a mailbox"
            box = engine.boxes[-1]  # the histogram's mailbox, just made
            mem = box.memory()
            peers = int(bsp.allreduce(mem["peers"], op="max"))
            held = int(bsp.allreduce(mem["buffers"], op="max"))
            nbytes = int(bsp.allreduce(mem["buffer_bytes"], op="max"))
            ok = bool(bsp.allreduce(0 if out.ok is False else 1, op="min"))
            ok_all = ok_all and ok
            lines[routing] = (f"  histogram {routing:<6} grid {'x'.join(map(str, grid_dims(bsp.nprocs, routing))):<7} "
                              f"peers {peers:>3}  {box.format.unit:>2} B/record on the wire  "
                              f"buffers held {held:>3} ({nbytes / 2**20:6.2f} MiB)  {'' if ok else 'CHECK FAILED'}")
    median = {r: n / float(np.median(t)) for r, t in times.items()}
    for routing in ROUTINGS:
        say(bsp, lines[routing])
        say(bsp, f"    {routing}: updates/s/rank median {median[routing]:>14,.0f}, best "
                  f"{n / min(times[routing]):>14,.0f} ({args.repeat} interleaved runs); the busiest rank "
                  f"moved {busiest[routing] / 1e6:,.1f} MB in + out ({busiest[routing] / busiest['direct']:.2f}x "
                  "direct's busiest)")
    ratio = {r: median[r] / median["direct"] for r in ROUTINGS}
    say(bsp, "  rate over direct (medians): " + ",  ".join(f"{r} {ratio[r]:.2f}x" for r in ROUTINGS if r != "direct")
              + f"  (target for 2d >= {TARGET_ROUTED}x: {'met' if ratio['2d'] >= TARGET_ROUTED else 'NOT met'})")
    say(bsp, "  computed by the same sizing code (hpcbsp.fabsp.routing.buffers_per_rank): buffers "
              "per rank of one mailbox, MiB at 64 KiB each")
    names = [f"node ({SIZING_PER_NODE}/node)" if r == "node" else r for r in ROUTINGS]
    say(bsp, "  " + f"{'P':>9}" + "".join(f"{r:>22}" for r in names))
    for p in SIZING_P:
        cells = []
        for routing in ROUTINGS:
            b = buffers_per_rank(p, routing, per_node=SIZING_PER_NODE)
            cells.append(f"{b:>9,} ({b * 64 / 1024:8.1f} MiB)")
        say(bsp, "  " + f"{p:>9,}" + "".join(f"{c:>22}" for c in cells))
    return ok_all
