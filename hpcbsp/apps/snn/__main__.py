"""``mpiexec -n P python -m hpcbsp.apps.snn --mode bsp|async|serial [options]``: run the simulator.

Rank 0 prints the network, the firing rate, simulated time per wall-clock second, the number of
synchronisations (bsp: global barriers; async: blocking waits) and the ledger summary; it writes
the raster plot, the spike trains and the ledger where asked.  Bad input prints one line on
stderr and exits with status 2.
"""
from __future__ import annotations

import json
import math
import sys
from typing import Any

import numpy as np

from hpcbsp.util.args.checks import LEDGER_SUFFIXES, check_memory, check_outputs
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import fraction, nonnegative_int, positive_float, positive_int
from hpcbsp.util.args.vocabulary import add_common_options, add_n
from hpcbsp.util.text import plural

from .bsp_mode import DEFAULT_WINDOW_CAP, SUPERSTEP_RULES
from .lif import LIFParams
from .network import NetworkSpec
from .result import RunResult

PROG = "mpiexec -n P python -m hpcbsp.apps.snn"
MODES = ("bsp", "async", "serial")


def build_parser() -> OneLineParser:
    d = NetworkSpec()
    parser = OneLineParser(
        prog=PROG,
        description="Spiking neural network simulator (leaky integrate-and-fire neurons, random "
                    "connectivity with integer delays) in BSP supersteps of the minimum delay, or "
                    "asynchronously with per-rank lookahead, or serially as the reference. All modes "
                    "give the same spike trains for a seed, on any number of ranks.",
        epilog="Delays are whole steps of --dt. Example: mpiexec -n 2 python -m hpcbsp.apps.snn "
               "--mode async --n 4000 --time-ms 500 --raster raster.png")
    parser.add_argument("--mode", choices=MODES, default="bsp",
                        help="bsp: supersteps of the minimum delay, spikes in BSP queues; async: point-to-point "
                             "messages with time stamps, no global barrier; serial: one-process numpy "
                             "reference (default bsp)")
    net = parser.add_argument_group("network")
    add_n(net, "neurons", per="in total", default=d.neurons, dest="neurons", old=("--neurons",))
    net.add_argument("--fanout", type=nonnegative_int, metavar="K", default=d.fanout,
                     help=f"outgoing synapses per neuron (default {d.fanout})")
    net.add_argument("--areas", type=positive_int, metavar="A", default=d.areas,
                     help=f"areas (contiguous id ranges) with short delays inside, long between (default {d.areas})")
    net.add_argument("--inter-area", type=fraction, metavar="F", default=d.inter_area,
                     help=f"fraction of synapses to other areas (default {d.inter_area})")
    for field, what in (("delay_min", "shortest delay inside an area"), ("delay_local_max", "longest delay inside an area"),
                        ("delay_long_min", "shortest delay between areas"), ("delay_max", "longest delay between areas")):
        net.add_argument("--" + field.replace("_", "-"), type=positive_int, metavar="STEPS", default=getattr(d, field),
                         help=f"{what}, in steps (default {getattr(d, field)})")
    run = parser.add_argument_group("simulation")
    run.add_argument("--time-ms", type=positive_float, metavar="MS", default=1000.0, help="simulated time in ms (default 1000)")
    run.add_argument("--dt", type=positive_float, metavar="MS", default=d.lif.dt_ms,
                     help=f"time step in ms (default {d.lif.dt_ms})")
    run.add_argument("--superstep", choices=SUPERSTEP_RULES, default="global",
                     help="bsp: superstep length = the network's minimum delay (global) or the minimum "
                          "delay of synapses between ranks (cross) (default global)")
    run.add_argument("--window", type=positive_int, metavar="STEPS", default=None,
                     help="async: at most this many steps per window (default: half the smallest delay from "
                          f"the rank to the ranks it projects to, at most {DEFAULT_WINDOW_CAP})")
    out = parser.add_argument_group("output")
    out.add_argument("--raster", metavar="PNG", help="write a spike raster plot: .png, .svg or .pdf (needs matplotlib)")
    out.add_argument("--spikes", metavar="PATH", help="write the spike trains: .npz (arrays step, neuron) or .csv")
    add_common_options(out, seed_help="network seed")
    return parser


def spec_from_args(parser: OneLineParser, args: Any) -> tuple[NetworkSpec, int]:
    """The network and the number of steps, or a one-line usage error."""
    if not (args.dt > 0 and math.isfinite(args.dt)):
        parser.error(f"--dt must be a positive number of ms, got {args.dt}")
    if not (args.time_ms > 0 and math.isfinite(args.time_ms)):
        parser.error(f"--time-ms must be > 0, got {args.time_ms}")
    steps = round(args.time_ms / args.dt)
    if abs(steps * args.dt - args.time_ms) > 1e-9 * args.time_ms or steps < 1:
        parser.error(f"--time-ms {args.time_ms} is not a whole number of steps of --dt {args.dt}")
    if steps >= 2**31 - 2 * (args.delay_max + (args.window or DEFAULT_WINDOW_CAP)):
        parser.error("too many steps (at most about 2^31)")
    if args.window is not None and args.window < 1:
        parser.error(f"--window must be >= 1 step, got {args.window}")
    spec = NetworkSpec(neurons=args.neurons, fanout=args.fanout, areas=args.areas, inter_area=args.inter_area,
                       delay_min=args.delay_min, delay_local_max=args.delay_local_max,
                       delay_long_min=args.delay_long_min, delay_max=args.delay_max, seed=args.seed,
                       lif=LIFParams(dt_ms=args.dt))
    problems = spec.problems()
    if problems:
        parser.error("; ".join(problems))
    # The whole synapse list (about 24 bytes a synapse, a few copies while it is built) and the
    # ring buffer of input per delay step and neuron (4 bytes each) on one rank.
    synapses = float(spec.neurons) * spec.fanout
    ring = (spec.max_delay + (args.window or DEFAULT_WINDOW_CAP) + 1.0) * spec.neurons
    check_memory(parser, 4 * 24.0 * synapses + 4.0 * ring,
                 f"--n {spec.neurons} --fanout {spec.fanout} --delay-max {spec.delay_max}",
                 "use fewer neurons, a smaller --fanout or shorter delays")
    return spec, steps


def save_spikes(path: str, res: RunResult) -> None:
    """Write the spike trains: ``.csv`` (step,neuron rows) or ``.npz`` (arrays ``step``, ``neuron``)."""
    if path.endswith(".csv"):
        np.savetxt(path, np.column_stack([res.spike_steps, res.spike_ids]), fmt="%d", delimiter=",",
                   header="step,neuron", comments="")
    else:
        np.savez(path, step=res.spike_steps, neuron=res.spike_ids, dt_ms=res.dt_ms)


def report(res: RunResult, spec: NetworkSpec) -> str:
    """Rank 0's text report."""
    lines = [f"snn --mode {res.mode} on {plural(res.nprocs, 'rank')}: {plural(spec.neurons, 'neuron')} in "
             f"{plural(spec.areas, 'area')}, "
             f"fan-out {spec.fanout}, delays {spec.delay_min}-{spec.delay_local_max} steps inside areas, "
             f"{spec.delay_long_min}-{spec.delay_max} between (dt = {res.dt_ms:g} ms), seed {spec.seed}",
             f"simulated {res.steps * res.dt_ms:g} ms ({res.steps:,} steps) in {res.wall_s:.3f} s wall "
             f"(+ {res.setup_s:.3f} s set-up): {res.speed:.3f} simulated s per wall-clock s",
             f"spikes: {res.spikes:,}   mean firing rate: {res.rate_hz:.2f} Hz"]
    if res.mode == "bsp":
        lines.append(f"synchronisations: {res.syncs:,} global barriers ({res.syncs_per_sim_s:,.0f} per simulated s); "
                     f"superstep = {res.interval} steps ({res.extra['superstep_rule']} minimum delay); "
                     f"{res.messages:,} spike records between ranks")
    elif res.mode == "async":
        x = res.extra
        lines.append(f"synchronisations: {res.syncs:,} blocking waits (max over ranks; "
                     f"{res.syncs_per_sim_s:,.0f} per simulated s, {x['wait_s_max']:.3f} s waiting); "
                     f"smallest lookahead {res.interval} steps")
        lines.append(f"time-advance messages: {res.messages:,} ({x['null_messages']:,} null, "
                     f"{x['message_bytes']:,} bytes); windows per rank: up to {x['windows_max']:,} "
                     f"of at most {x['window_max']} steps")
    if res.ledger is not None:
        lines.append(res.ledger.text())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    spec, steps = spec_from_args(parser, args)
    if args.ledger and args.mode == "serial":
        parser.error("--ledger needs --mode bsp or async (the serial reference has no supersteps)")
    # Before the run: a bad path must not cost the result.
    check_outputs(parser, [(args.ledger, "--ledger file", LEDGER_SUFFIXES),
                           (args.spikes, "--spikes file", (".npz", ".csv")),
                           (args.raster, "--raster plot", (".png", ".svg", ".pdf"))])
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    if args.mode == "serial":
        if size > 1:
            parser.error(f"--mode serial runs on one process; started on {size} ranks")
        from .serial import simulate_serial

        res = simulate_serial(spec, steps, progress=not args.quiet)
    else:
        if size > spec.neurons:
            parser.error(f"{size} ranks but only {spec.neurons} neurons")
        import hpcbsp

        from .async_mode import run_async
        from .bsp_mode import run_bsp

        def body(bsp: "hpcbsp.BSP") -> RunResult:
            if args.ledger:  # every superstep's record, in files as the run goes (save merges them)
                bsp.ledger.stream_for(args.ledger)
            if args.mode == "bsp":
                res = run_bsp(bsp, spec, steps, rule=args.superstep, progress=not args.quiet)
            else:
                res = run_async(bsp, spec, steps, window=args.window, progress=not args.quiet)
            if args.ledger:
                bsp.ledger.save(args.ledger)
            return res

        res = hpcbsp.run(body)
        if MPI.COMM_WORLD.Get_rank() != 0:
            return 0
    if args.spikes:
        save_spikes(args.spikes, res)
    raster_note = None
    if args.raster:
        from .raster import missing_matplotlib, save_raster

        raster_note = missing_matplotlib()
        if raster_note is None:
            save_raster(args.raster, res.spike_steps, res.spike_ids, dt_ms=res.dt_ms, neurons=spec.neurons,
                        total_steps=steps, title=f"snn --mode {res.mode}, {res.nprocs} rank(s), seed {spec.seed}")
    if args.json:
        print(json.dumps(res.summary()))
    else:
        print(report(res, spec))
        if args.raster:
            print(f"raster: {args.raster}" if raster_note is None else f"raster: skipped: {raster_note}")
    if raster_note is not None and args.json:
        print(f"snn: raster skipped: {raster_note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
