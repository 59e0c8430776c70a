"""The sections of ``python -m hpcbsp.bench fabsp`` across hosts: what a link carries (section
4) and routing by node with combining (section 5); see the package's docstring."""
from __future__ import annotations

import argparse
import re
from typing import Callable

import numpy as np

from ...apps.irregular.histogram import run_histogram
from ...apps.irregular.index_gather import run_index_gather
from ...apps.irregular.report import Outcome
from ...fabsp.engine import Engine
from ...runtime import BSP
from .common import say


def link_rate(text: str) -> float:
    """argparse type: a link rate in bits per second, as ``tc`` spells it (``100mbit``,
    ``1gbit``, ``500kbit``) or a plain number of bit/s."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([kmg]?)(?:bit)?\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a link rate (say 100mbit, 1gbit or "
                                         "500kbit, or bit/s)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def nic_bytes(iface: str) -> tuple[int, int] | None:
    """(tx, rx) bytes of this host's interface ``iface`` to the other nodes (``/proc/net/dev``,
    which shows the network namespace of the reading process: an emulated node's own), or None."""
    try:
        with open("/proc/net/dev") as dev:
            for line in dev:
                name, _, counters = line.partition(":")
                if name.strip() == iface:
                    fields = counters.split()
                    return int(fields[8]), int(fields[0])
    except (OSError, ValueError, IndexError):
        pass
    return None


def link(bsp: BSP, args: argparse.Namespace) -> bool:
    """Section 4: bytes per update and the busiest host's link rate, FA-BSP and plain BSP."""
    from mpi4py import MPI

    hosts = bsp.gather_all(MPI.Get_processor_name())
    nhosts = len(set(hosts))
    # One rank per host reads its counters; on one host no link is crossed (and the host's own
    # interface carries other traffic), so none does.
    first_on_host = nhosts > 1 and hosts.index(hosts[bsp.pid]) == bsp.pid
    rate = args.link_rate
    say(bsp, f"  {bsp.nprocs} ranks on {nhosts} host(s); link rate "
              f"{'not given (--link-rate)' if rate is None else f'{rate / 1e6:g} Mbit/s = {rate / 8e6:.2f} MB/s each way'}")
    ok_all = True
    apps: tuple[tuple[str, Callable[..., Outcome]], ...] = (("histogram", run_histogram),
                                                            ("index_gather", run_index_gather))
    for app, runner in apps:
        rates = {}
        for mode in ("fabsp", "bsp"):
            best = float("inf")
            for i in range(args.repeat):
                mark = bsp.ledger.totals()
                nic0 = nic_bytes(args.iface) if first_on_host else None
                out = runner(bsp, mode, args.updates, args.table, args.seed, args.chunk, i == 0)
                nic1 = nic_bytes(args.iface) if first_on_host else None
                seconds = float(bsp.allreduce(out.seconds, op="max"))
                ok_all = ok_all and bool(bsp.allreduce(0 if out.ok is False else 1, op="min"))
                payload = int(bsp.allreduce(bsp.ledger.totals()["bytes_out"] - mark["bytes_out"], op="sum"))
                tx, rx = (nic1[0] - nic0[0], nic1[1] - nic0[1]) if nic0 and nic1 else (0, 0)
                wire_tx = int(bsp.allreduce(tx, op="sum"))
                busiest = max(float(bsp.allreduce(tx, op="max")), float(bsp.allreduce(rx, op="max")))
                if seconds < best:
                    best, figures = seconds, (payload, wire_tx, busiest)
            updates = args.updates * bsp.nprocs
            payload, wire_tx, busiest = figures
            rates[mode] = args.updates / best
            wire = (f"wire {wire_tx / updates:5.2f} B/update (all hosts' interfaces, headers too), "
                    f"busiest host {busiest / best / 1e6:6.2f} MB/s"
                    + (f" = {busiest * 8 / best / rate:4.0%} of the link" if rate else "")) \
                if wire_tx else ("wire: one host, no link crossed" if nhosts == 1 else "wire: no counters")
            say(bsp, f"  {app:<13} {mode:<6} {best:8.3f} s {rates[mode]:>13,.0f} per s per rank;  "
                      f"payload {payload / updates:5.2f} B/update;  {wire}")
        say(bsp, f"  {app}: FA-BSP / BSP = {rates['fabsp'] / rates['bsp']:.2f}x")
    return ok_all


def node_of(hosts: list[str]) -> np.ndarray:
    """Each rank's node, numbered in order of first appearance (as routing by node numbers them)."""
    number: dict[str, int] = {}
    return np.array([number.setdefault(h, len(number)) for h in hosts], dtype=np.int64)


#: The variants of section 5: (app, routing, combine).
COMBINE_VARIANTS = (("histogram", "direct", False), ("histogram", "node", False),
                    ("histogram", "direct", True), ("histogram", "node", True),
                    ("index_gather", "direct", False), ("index_gather", "node", False))


def combine(bsp: BSP, args: argparse.Namespace) -> bool:
    """Section 5: direct vs by node vs combining, messages per node pair and throughput."""
    from mpi4py import MPI

    hosts = bsp.gather_all(MPI.Get_processor_name())
    node = node_of(hosts)
    nodes = int(node.max()) + 1
    per_node = np.bincount(node)
    first_on_host = nodes > 1 and hosts.index(hosts[bsp.pid]) == bsp.pid
    across = node[:, None] != node[None, :]
    say(bsp, f"  {bsp.nprocs} ranks on {nodes} node(s), {per_node.min()}-{per_node.max()} a node; "
              f"{args.updates:,} updates per rank, table {args.table:,} per rank, {args.repeat} interleaved rounds;"
              f" messages are MPI messages (buffers), records count every hop")
    ok_all = True
    updates = args.updates * bsp.nprocs
    for skew in (0.0, args.skew) if args.skew else (0.0,):
        rows: dict[tuple[str, str, bool], dict[str, float]] = {}
        times: dict[tuple[str, str, bool], list[float]] = {}
        variants = [v for v in COMBINE_VARIANTS if not (skew and v[0] == "index_gather")]
        for rnd in range(args.repeat):
            for app, routing, combine in variants:
                engine = Engine.existing(bsp)
                before = len(engine.boxes) if engine is not None else 0
                mark = bsp.ledger.totals()
                nic0 = nic_bytes(args.iface) if first_on_host else None
                if app == "histogram":
                    out = run_histogram(bsp, "fabsp", args.updates, args.table, args.seed, args.chunk,
                                        rnd == 0, skew=skew, combine=combine, routing=routing)
                else:
                    out = run_index_gather(bsp, "fabsp", args.updates, args.table, args.seed, args.chunk,
                                           rnd == 0, routing=routing)
                nic1 = nic_bytes(args.iface) if first_on_host else None
                seconds = float(bsp.allreduce(out.seconds, op="max"))
                ok_all = ok_all and bool(bsp.allreduce(0 if out.ok is False else 1, op="min"))
                key = (app, routing, combine)
                times.setdefault(key, []).append(seconds)
                if rnd:
                    continue
                engine = Engine.existing(bsp)
                assert engine is not None, "the app made mailboxes"
                mine = np.zeros(bsp.nprocs, dtype=np.int64)
                for box in engine.boxes[before:]:
                    counted = box.messages()
                    if counted is not None:
                        mine += counted
                mine[bsp.pid] = 0  # (to itself: no MPI)
                matrix = np.array(bsp.gather_all(mine))  # [source, destination]
                moved = bsp.ledger.totals()  # (what the supersteps since the mark did: the difference)
                records = int(bsp.allreduce(moved["msgs_out"] - mark["msgs_out"], op="sum"))
                payload = int(bsp.allreduce(moved["bytes_out"] - mark["bytes_out"], op="sum"))
                tx = (nic1[0] - nic0[0]) if nic0 and nic1 else 0
                wire = int(bsp.allreduce(tx, op="sum"))
                pair = np.zeros((nodes, nodes), dtype=np.int64)
                np.add.at(pair, (node[:, None].repeat(bsp.nprocs, 1), node[None, :].repeat(bsp.nprocs, 0)), matrix)
                off_diag = pair[~np.eye(nodes, dtype=bool)]
                rows[key] = {"msgs": matrix.sum() / bsp.nprocs, "pair": off_diag.mean() if nodes > 1 else 0.0,
                             "pair_max": off_diag.max() if nodes > 1 else 0,
                             "rank_pairs": int(np.count_nonzero(matrix[across])),
                             "records": records / updates, "payload": payload / updates, "wire": wire / updates}
        label = f"skewed keys (Zipf {skew:g})" if skew else "uniform keys"
        say(bsp, f"  {label}:")
        say(bsp, f"    {'app':<13} {'routing':<7} {'combine':<7} {'updates/s/rank':>14} {'/direct':>7} "
                  f"{'msgs/rank':>9} {'msgs/node pair':>14} {'(max)':>6} {'rank pairs across':>17} "
                  f"{'records/upd':>11} {'payload B/upd':>13} {'link B/upd':>10}")
        for app, routing, combine in variants:
            key = (app, routing, combine)
            rate = args.updates / float(np.median(times[key]))
            base = args.updates / float(np.median(times[(app, "direct", False)]))
            r = rows[key]
            wire_text = f"{r['wire']:.2f}" if r["wire"] else "-"
            say(bsp, f"    {app:<13} {routing:<7} {'sum' if combine else '-':<7} {rate:>14,.0f} {rate / base:>6.2f}x "
                      f"{r['msgs']:>9,.1f} {r['pair']:>14,.1f} {r['pair_max']:>6,.0f} "
                      f"{r['rank_pairs']:>8} of {int(across.sum()):<6} "
                      f"{r['records']:>11.3f} {r['payload']:>13.2f} "
                      f"{wire_text:>10}")
    return ok_all
