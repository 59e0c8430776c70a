"""SNN simulator: BSP supersteps of the minimum delay vs asynchronous lookahead (mpiexec -n 2).

    mpiexec -n 2 python -m hpcbsp.bench snn [--neurons N] [--time-ms T] [--rounds R] [--quick]

One generated network (short delays inside areas, long ones between, so the minimum delay is far
below the mean) is simulated by ``--mode bsp`` with supersteps of the network's minimum delay (the
neural-simulator convention), by ``--mode bsp`` with supersteps of the minimum delay *between
ranks* (the strongest exact BSP baseline for this distribution), and by ``--mode async``.  The
modes run alternately (R rounds, medians), and every run's spike trains must equal the first's.
Figures: wall time of the simulation loop, synchronisations per simulated second (bsp: global
barriers; async: blocking waits, max over ranks), messages, and the ratios to async.
"""
from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

import hpcbsp
from hpcbsp.apps.snn.async_mode import simulate_async
from hpcbsp.apps.snn.bsp_mode import simulate_bsp
from hpcbsp.apps.snn.network import NetworkSpec, distribute
from hpcbsp.bench import measuring
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import nonnegative_int, positive_float, positive_int
from hpcbsp.util.args.vocabulary import add_json, add_n, add_repeats
from hpcbsp.util.progress import Progress

#: (name, how) of the runs compared; the baselines first, async last (the ratios' denominator).
RUNS = (("bsp global d_min", "global"), ("bsp cross-rank d_min", "cross"), ("async lookahead", "async"))


def bench(bsp: "hpcbsp.BSP", spec: NetworkSpec, steps: int, rounds: int) -> dict[str, Any] | None:
    net = distribute(bsp, spec)
    delays = bsp.allreduce(np.array([net.delay.size, net.delay.sum(dtype=np.int64)], dtype=np.int64), op="sum")
    d_max = int(bsp.allreduce(np.int64(net.delay.max(initial=0)), op="max"))
    d_min = int(bsp.allreduce(np.int64(net.min_delay), op="min"))
    # Warm-up (untimed): compile the kernels for these shapes and open the point-to-point
    # connections, which would otherwise land on whichever run comes first.
    warm = min(steps, 200)
    simulate_async(bsp, net, warm)
    simulate_bsp(bsp, net, warm, rule="global")
    walls: dict[str, list[float]] = {name: [] for name, _ in RUNS}
    last: dict[str, Any] = {}
    first_trains = None
    identical = True
    show = Progress("bench snn", rounds * len(RUNS), unit="run", enabled=bsp.pid == 0)
    for r in range(rounds):
        order = RUNS[r % len(RUNS):] + RUNS[:r % len(RUNS)]  # rotate, so no mode always runs first
        for name, how in order:
            if how == "async":
                res = simulate_async(bsp, net, steps)
            else:
                res = simulate_bsp(bsp, net, steps, rule=how)
            walls[name].append(res.wall_s)
            last[name] = res
            if bsp.pid == 0:
                trains = (res.spike_steps, res.spike_ids)
                if first_trains is None:
                    first_trains = trains
                else:
                    identical &= all(np.array_equal(a, b) for a, b in zip(first_trains, trains))
            show(r * len(RUNS) + order.index((name, how)) + 1, f"round {r + 1}/{rounds} {name}: {res.wall_s:.3f} s")
    if bsp.pid != 0:
        return None
    rows = []
    for name, _ in RUNS:
        res = last[name]
        rows.append({"run": name, "interval_steps": res.interval, "wall_s": statistics.median(walls[name]),
                     "walls_s": walls[name], "syncs": res.syncs, "syncs_per_sim_s": res.syncs_per_sim_s,
                     "messages": res.messages, "wait_s": res.extra.get("wait_s_max"),
                     "window_max": res.extra.get("window_max")})
    any_res = last[RUNS[0][0]]
    return {"nprocs": bsp.nprocs, "neurons": spec.neurons, "fanout": spec.fanout, "areas": spec.areas,
            "synapses": int(delays[0]), "delay_min": d_min, "delay_mean": float(delays[1] / max(delays[0], 1)),
            "delay_max": d_max, "dt_ms": spec.lif.dt_ms, "steps": steps, "rounds": rounds,
            "spikes": any_res.spikes, "rate_hz": any_res.rate_hz, "identical": bool(identical), "rows": rows}


def print_table(out: dict[str, Any]) -> None:
    sim_s = out["steps"] * out["dt_ms"] * 1e-3
    print(f"snn: {out['nprocs']} ranks, {out['neurons']:,} neurons in {out['areas']} areas, fan-out {out['fanout']} "
          f"({out['synapses']:,} synapses); delays min {out['delay_min']}, mean {out['delay_mean']:.1f}, "
          f"max {out['delay_max']} steps of {out['dt_ms']:g} ms; {1e3 * sim_s:g} ms simulated; "
          f"medians of {out['rounds']} alternating round(s)")
    print(f"  {'run':<22} {'step':>5} {'wall [s]':>9} {'sim s/wall s':>12} {'syncs':>7} {'syncs/sim s':>11} "
          f"{'messages':>9} {'wait [s]':>9}")
    for row in out["rows"]:
        wait = f"{row['wait_s']:.3f}" if row["wait_s"] is not None else "-"
        print(f"  {row['run']:<22} {row['interval_steps']:>5} {row['wall_s']:>9.3f} {sim_s / row['wall_s']:>12.3f} "
              f"{row['syncs']:>7,} {row['syncs_per_sim_s']:>11,.0f} {row['messages']:>9,} {wait:>9}")
    base = out["rows"][-1]
    for row in out["rows"][:-1]:
        sync_ratio = row["syncs"] / base["syncs"] if base["syncs"] else float("inf")
        print(f"  {row['run']} / async: wall {row['wall_s'] / base['wall_s']:.2f}x, "
              f"synchronisations {sync_ratio:.1f}x")
    print(f"  spike trains identical in every run: {'yes' if out['identical'] else 'NO'} "
          f"({out['spikes']:,} spikes, {out['rate_hz']:.1f} Hz)")
    print(f"  step: superstep length (bsp) or smallest lookahead (async), in steps; async windows of at most "
          f"{base['window_max']} steps; wait: async time blocked (max over ranks)")


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="mpiexec -n 2 python -m hpcbsp.bench snn", description=__doc__.split("\n\n")[0])
    d = NetworkSpec()
    add_n(parser, "neurons", per="in total", default=d.neurons, dest="neurons", old=("--neurons",))
    parser.add_argument("--fanout", type=nonnegative_int, default=d.fanout, help=f"synapses per neuron (default {d.fanout})")
    parser.add_argument("--areas", type=positive_int, default=d.areas, help=f"areas (default {d.areas})")
    parser.add_argument("--time-ms", type=positive_float, default=2000.0, help="simulated ms per run (default 2000)")
    add_repeats(parser, "alternating rounds, medians reported", default=3, dest="rounds", old=("--rounds",))
    parser.add_argument("--quick", action="store_true", help="a short run: 2000 neurons, 200 ms, 1 round")
    add_json(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.neurons, args.time_ms, args.rounds = 2000, 200.0, 1
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if not args.time_ms > 0:
        parser.error("--time-ms must be > 0")
    spec = NetworkSpec(neurons=args.neurons, fanout=args.fanout, areas=args.areas)
    problems = spec.problems()
    if problems:
        parser.error("; ".join(problems))
    steps = round(args.time_ms / spec.lif.dt_ms)
    if MPI.COMM_WORLD.Get_size() > spec.neurons:
        parser.error("more ranks than neurons")
    measuring()
    out = hpcbsp.run(bench, spec, steps, args.rounds)
    if MPI.COMM_WORLD.Get_rank() != 0:
        return 0
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
        if out["nprocs"] == 1:
            print("  note: with one rank nothing crosses ranks; run under mpiexec -n 2")
    return 0 if out["identical"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
