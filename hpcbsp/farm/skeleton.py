"""The BSF master/worker skeleton on the BSP runtime (Sokolinsky's Algorithm 2).

Layout: rank 0 is the master, ranks 1..K the workers (K = nprocs − 1), as in the BSF model's
K + 1 nodes; the master does not Map.  On one rank the master is its own single worker (K = 1,
no communication).  The list of length l is split into K contiguous sublists of equal length
(the first l mod K workers hold one more), each built only on its worker.

One iteration with the ``linear`` exchange (the default; Sokolinsky's skeleton) is two supersteps:

1. ``farm:order``: the master puts the order (x and an exit flag) to every worker, one by one;
2. ``farm:result``: each worker maps its sublist, folds it and puts its partial result (and
   its Map and fold times) to the master's slot for it.

With the ``tree`` exchange (``exchange="tree"`` or ``$HPCBSP_FARM_EXCHANGE=tree``) the order goes
down a binomial tree over the P = K + 1 ranks and the partial results come back up it, D =
⌈log2 P⌉ supersteps each way (the model's D(K), :func:`hpcbsp.farm.terms.tree_levels`): in
order round d (d = D−1 … 0) every rank r ≡ 0 (mod 2^(d+1)) that holds the order puts it to
r + 2^d; in result round d (d = 0 … D−1) every rank r ≡ 2^d (mod 2^(d+1)) puts the rows it
holds, its own and its subtree's [r, r + 2^d), to r − 2^d.  The master
ends with the same K partial results in the same slots and folds them itself, as in the model's
tree form (:mod:`hpcbsp.farm.model`: 2·D supersteps, the order down D levels, all K results
through the master's link, master fold of K results), so both exchanges give bit-identical
results.

With emulated compute (:mod:`hpcbsp.farm.emulation`) the workers wait instead of mapping and
folding, and the run makes exactly ``max_iter`` iterations: a simulation of compute.

The master then folds the K partial results, computes the next x and runs the stop test; the
next order carries the exit flag.  A final ``broadcast`` gives every rank the same
:class:`FarmResult`.

BSP cost per iteration (h-relations), linear: ``farm:order`` K·(n + 1)·8 bytes and K messages out
of the master, (n + 1)·8 bytes into each worker (n = x.size); ``farm:result`` (r + 2)·8 bytes out
of each worker and K·(r + 2)·8 bytes into the master (r = reduce element size).  Tree: each order
round at most (n + 1)·8 bytes and one message out of and into any rank; result round d at most
2^d·(r + 2)·8 bytes and one message out of and into any rank.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..runtime import BSP, BSPError
from ..runtime.api.distribution import block_range
from ..runtime.environment import setting
from ..util.choices import EXCHANGES
from . import emulation as emu
from .checkpointing import FarmCheckpoint
from .problem import BSFProblem
from .terms import tree_levels
from .timings import FarmTimings, Samples, append_report, check_report, summarise

#: One-byte supersteps run untimed before L is measured: the first ones after the coarrays are
#: made are slower (2-6x at 2 ranks here) while the exchange's paths warm up.
LATENCY_WARMUP = 10
#: One-byte supersteps timed to measure L (their median).
LATENCY_REPEATS = 15
#: Environment variable that selects the exchange for programs that do not pass one.
EXCHANGE_ENV = "HPCBSP_FARM_EXCHANGE"


@dataclass
class FarmResult:
    """The outcome of :func:`run_farm`, the same on every rank."""

    x: np.ndarray
    iterations: int
    converged: bool
    timings: FarmTimings

    @property
    def workers(self) -> int:
        return self.timings.workers

    @property
    def emulated(self) -> bool:
        """True when the workers' compute was emulated: then x is not a solution."""
        return self.timings.emulated is not None


def run_farm(bsp: BSP, problem: BSFProblem, x0: Any, *, max_iter: int = 1000, report: str | None = None,
             label: str | None = None, checkpoint: FarmCheckpoint | None = None,
             progress: Callable[[int], None] | None = None,
             exchange: str | None = None, emulate: emu.FarmEmulation | None = None) -> FarmResult:
    """Run a BSF program on this BSP context (collective: every rank calls it).

    Parameters
    ----------
    bsp
        The BSP context; rank 0 becomes the master.
    problem
        The map list, Map, Reduce, Compute and StopCond.
    x0
        The initial approximation (a real array; the same on every rank is not required, the
        master's is used).
    max_iter
        Stop after this many iterations even if ``stop`` never holds (with emulated compute:
        exactly this many).
    report
        File to append the run's timings to as a JSON line (default ``$HPCBSP_FARM_REPORT``);
        ``hpcbsp-cost calibrate`` collects these.  Checked on every rank before the work
        (:class:`~hpcbsp.runtime.errors.BadInput` if it cannot be written).
    label
        A name for the run in the report.
    checkpoint
        Save x and the iteration count every ``checkpoint.every`` iterations, and resume from an
        earlier checkpoint when ``checkpoint.restart`` (see :mod:`hpcbsp.farm.checkpointing`).
    progress
        Called on the master as ``progress(iterations)`` after every iteration (e.g. a
        :class:`hpcbsp.util.progress.Progress`).
    exchange
        ``"linear"`` (the master talks to the workers one by one) or ``"tree"`` (binomial tree
        broadcast of the order and gather of the results); default ``$HPCBSP_FARM_EXCHANGE`` or
        linear.  Both give the same bits.
    emulate
        Emulate the workers' compute (:class:`~hpcbsp.farm.emulation.FarmEmulation`): they wait
        the Map's and the fold's measured times instead; default ``$HPCBSP_FARM_EMULATE`` or off.

    Returns
    -------
    FarmResult
        Final x, iteration count, whether ``stop`` held, and the measured BSF parameters.
    """
    exchange = _exchange_form(bsp, exchange)
    if emulate is None:
        emulate = emu.emulation_from_env()
    check_report(report)  # before the work: an unwritable report must not cost the run
    workers = max(1, bsp.nprocs - 1)
    assert problem.list_length is not None, "set by BSFProblem"
    length = problem.list_length
    if workers > length:
        raise BSPError(f"rank {bsp.pid}: the farm has {workers} workers but the map list only {length} "
                       f"element(s); run with at most {length + 1} ranks")
    x = np.array(x0, dtype=np.float64).reshape(-1)
    # Every rank learns the reduce element's size from one element of its own: no message needed.
    probe = problem.map_block(x, problem.sublist(0, 1))
    r_shape = probe.shape[1:]
    r_size = int(np.prod(r_shape, dtype=np.int64))
    iterations, done = 0, False
    if checkpoint is not None:
        x, iterations, done = checkpoint.resume(bsp, x)
    times = None
    if emulate is not None:
        times, x = _emulation_times(bsp, problem, x, emulate)
        done = False  # an emulated run makes exactly max_iter iterations
    if bsp.nprocs == 1:
        return _run_alone(bsp, problem, x, r_shape, max_iter, report, label, checkpoint, iterations, done,
                          times, progress)

    master = bsp.pid == 0
    n = x.size
    slot = r_size + 2  # partial result, Map time, fold time
    tree = exchange == "tree"
    # Per-iteration buffers: scratch, so checkpoints do not save them.  A tree's inner ranks
    # forward the order and their subtree's results, so every rank holds both there.
    order = bsp.coarray(n + 1 if tree or not master else 0, dtype=np.float64, name="farm:order", scratch=True)
    results = bsp.coarray(workers * slot if tree or master else 0, dtype=np.float64, name="farm:results",
                          scratch=True)
    ping = bsp.coarray(1 if bsp.pid == 1 else 0, dtype=np.uint8, name="farm:ping", scratch=True)
    latency = _measure_latency(bsp, ping)

    samples = Samples()  # (bounded: a run of any length keeps at most MAX_SAMPLES iterations)
    sub = partial = None
    share = 0
    if not master:
        start, stop = block_range(length, workers, bsp.pid - 1)
        share = stop - start
        if times is None:
            sub = problem.sublist(start, stop)
        else:  # computed for real once; the iterations send it again after their waits
            partial = emu.real_partial(problem, x, start, stop)
    converged = done
    t_loop = time.perf_counter()
    while True:
        t_iter = time.perf_counter()
        finish = False
        if master:
            finish = done or iterations >= max_iter
            message = np.append(x, 1.0 if finish else 0.0)
        got: np.ndarray | None
        if tree:
            got = _tree_order(bsp, order, message if master else None)
        else:
            if master:
                for w in range(1, workers + 1):
                    order.put(w, message)
            bsp.sync("farm:order")
            got = None if master else order.local
        if master:
            if finish:
                break
        else:
            assert got is not None
            x = got[:n].copy()
            if got[n] != 0.0:
                break
            if times is None:
                t0 = time.perf_counter()
                b = problem.map_block(x, sub)
                t1 = time.perf_counter()
                s = problem.fold_block(b).reshape(-1)
                map_s, fold_s = t1 - t0, time.perf_counter() - t1
            else:
                map_s, fold_s = emu.wait_split(times["t_map"] * share / length, times["t_a"] * (share - 1))
                assert partial is not None
                s = partial
            row = np.concatenate([s, [map_s, fold_s]])
            if tree:
                results.local[(bsp.pid - 1) * slot:bsp.pid * slot] = row
            else:
                results.put(0, row, offset=(bsp.pid - 1) * slot)
        if tree:
            _tree_gather(bsp, results, slot)
        else:
            bsp.sync("farm:result")
        if master:
            part = results.local.reshape(workers, slot)
            t0 = time.perf_counter()
            s = problem.fold_block(part[:, :r_size].reshape((workers, *r_shape)))
            t1 = time.perf_counter()
            x_next = np.asarray(problem.compute(x, s), dtype=np.float64).reshape(-1)
            done = bool(problem.stop(x_next, x)) and times is None
            t2 = time.perf_counter()
            x = x_next
            converged = done
            samples.add(t2 - t_iter, part[:, r_size].sum(), part[:, r_size + 1].sum(), t1 - t0, t2 - t1)
        iterations += 1  # every rank counts, so that all agree when a checkpoint is due
        if master and progress is not None:
            progress(iterations)
        if checkpoint is not None:
            checkpoint.maybe_save(bsp, x if master else None, iterations, done)
    total = time.perf_counter() - t_loop
    timings = None
    if master:
        timings = summarise(samples.columns, workers=workers, list_length=length, iterations=iterations,
                            total_s=total, superstep_s=latency, exchange=exchange, emulated=times,
                            order_share=(n + 1) / (n + 1 + slot))
        append_report(timings, report, label=label, nprocs=bsp.nprocs)
    timings, iterations, converged = bsp.broadcast((timings, iterations, converged) if master else None)
    return FarmResult(x, iterations, converged, timings)


def _exchange_form(bsp: BSP, exchange: str | None) -> str:
    form = exchange if exchange is not None else setting(EXCHANGE_ENV)
    if form not in EXCHANGES:
        raise BSPError(f"rank {bsp.pid}: exchange={form!r} is not a farm exchange; choose from "
                       f"{', '.join(EXCHANGES)}")
    return str(form)


def _tree_order(bsp: BSP, order: Any, message: np.ndarray | None) -> np.ndarray:
    """Broadcast the master's order down a binomial tree (D supersteps ``farm:order``).

    h-relation of each round: at most one message of (n + 1)·8 bytes out of and into any rank.
    """
    me, p = bsp.pid, bsp.nprocs
    have = message
    for d in range(int(tree_levels(p - 1)) - 1, -1, -1):
        step = 1 << d
        if have is not None and me % (2 * step) == 0 and me + step < p:
            order.put(me + step, have)
        bsp.sync("farm:order")
        if have is None and me % (2 * step) == step:
            have = order.local
    assert have is not None, "every rank is reached by the tree"
    return have


def _tree_gather(bsp: BSP, results: Any, slot: int) -> None:
    """Gather the workers' result rows up the binomial tree to the master (D supersteps ``farm:result``).

    Row w − 1 belongs to worker w.  In round d, rank r ≡ 2^d (mod 2^(d+1)) holds the rows of
    ranks [r, r + 2^d) and puts them, as one message, to the same rows on r − 2^d.
    h-relation of round d: at most 2^d·slot·8 bytes and one message out of and into any rank.
    """
    me, p = bsp.pid, bsp.nprocs
    for d in range(int(tree_levels(p - 1))):
        step = 1 << d
        if me % (2 * step) == step:
            hi = min(me + step, p)
            results.put(me - step, results.local[(me - 1) * slot:(hi - 1) * slot], offset=(me - 1) * slot)
        bsp.sync("farm:result")


def _emulation_times(bsp: BSP, problem: BSFProblem, x: np.ndarray,
                     emulate: emu.FarmEmulation) -> tuple[dict[str, Any], np.ndarray]:
    """Collective: the waits' times (measured on the master while the workers wait, or given)
    and the master's x, the same on every rank.  One broadcast superstep."""
    times = None
    if bsp.pid == 0:
        if emulate.measured:
            t_map, t_a = emu.measure_map(problem, x)
        else:
            assert emulate.t_map is not None, "not measured: given"
            t_map, t_a = emulate.t_map, float(emulate.t_a or 0.0)
        times = {"t_map": t_map, "t_a": t_a, "measured": emulate.measured}
    times, x = bsp.broadcast((times, x) if bsp.pid == 0 else None)
    return times, np.array(x, dtype=np.float64)


def _measure_latency(bsp: BSP, ping: Any) -> float:
    """L: the median time of a superstep in which the master puts one byte to worker 1, after
    :data:`LATENCY_WARMUP` untimed ones.

    h-relation of each: 1 byte, one message, out of rank 0 and into rank 1.
    """
    times = []
    for i in range(LATENCY_WARMUP + LATENCY_REPEATS):
        t0 = time.perf_counter()
        if bsp.pid == 0:
            ping.put(1, np.ones(1, dtype=np.uint8))
        bsp.sync("farm:latency")
        if i >= LATENCY_WARMUP:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _run_alone(bsp: BSP, problem: BSFProblem, x: np.ndarray, r_shape: tuple[int, ...], max_iter: int,
               report: str | None, label: str | None, checkpoint: FarmCheckpoint | None,
               iterations: int, converged: bool, times: dict[str, Any] | None,
               progress: Callable[[int], None] | None = None) -> FarmResult:
    """One rank: the master is its own only worker (K = 1, no exchange, L = 0)."""
    assert problem.list_length is not None, "set by BSFProblem"
    length = problem.list_length
    sub = problem.sublist(0, length)
    partial = None if times is None else emu.real_partial(problem, x, 0, length)
    samples = Samples()  # (bounded: a run of any length keeps at most MAX_SAMPLES iterations)
    t_loop = time.perf_counter()
    while iterations < max_iter and not converged:
        t0 = time.perf_counter()
        if times is None:
            b = problem.map_block(x, sub)
            t1 = time.perf_counter()
            s = problem.fold_block(b)
        else:
            map_s, _ = emu.wait_split(times["t_map"], times["t_a"] * (length - 1))
            t1 = t0 + map_s
            assert partial is not None
            s = partial
        t2 = time.perf_counter()
        x_next = np.asarray(problem.compute(x, s.reshape(r_shape)), dtype=np.float64).reshape(-1)
        converged = bool(problem.stop(x_next, x)) and times is None
        t3 = time.perf_counter()
        x = x_next
        iterations += 1
        samples.add(t3 - t0, t1 - t0, t2 - t1, 0.0, t3 - t2)
        if progress is not None:
            progress(iterations)
        if checkpoint is not None:
            checkpoint.maybe_save(bsp, x, iterations, converged)
    timings = summarise(samples.columns, workers=1, list_length=length, iterations=iterations,
                        total_s=time.perf_counter() - t_loop, superstep_s=0.0, exchange_measured=False,
                        emulated=times)
    append_report(timings, report, label=label, nprocs=1)
    bsp.sync("farm:done")  # keep the superstep structure visible in the ledger
    return FarmResult(x, iterations, converged, timings)
