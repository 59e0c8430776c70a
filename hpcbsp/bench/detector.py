"""The failure detector at scale: its protocol simulated on N nodes (datagrams, detection, false positives).

    python -m hpcbsp.bench detector [--nodes N ...] [--loss P] [--stall S] [--seconds D]
                                    [--failures F] [--seed S]

Each member runs the watchers' own protocol code (:mod:`hpcbsp.runtime.failure.protocol`, HMACs
included) in one deterministic discrete-event loop (a ``heapq`` of ticks and deliveries): each
member ticks every period at its own phase, each datagram arrives 0.1-0.5 ms after it left or is
lost with probability ``--loss``.  Per number of nodes it prints

    nodes N: X datagrams per node per second, detection p50 A s p99 B s, false positives F

where X is counted over ``--seconds`` of protocol time with no failure (the false positives F are
the verdicts reached in that time: members that gave up a node that lives; with ``--stall S``, a
hundredth of the nodes (at least one) each stall S seconds once at a random moment: their watcher
neither beats nor reads), and the detection times are those of ``--failures`` trials, each with a
fresh job in which one random node freezes at a random moment: the seconds from the freeze to the
moment each of the other members knows the verdict (and so ends its ranks), p50 and p99 over all
members of all trials.  Without ``--loss`` and ``--stall`` it runs the four cases: no loss, 1 %
and 5 % loss, and stalls of 5 s.  Period and timeout are the defaults of
``HPCBSP_HEARTBEAT_PERIOD`` and ``HPCBSP_HEARTBEAT_TIMEOUT`` (or those variables' values).

Not SimGrid: the protocol is a pure state machine whose only inputs are datagrams and clock
ticks, so a hundred-line event loop drives the very code the watchers run, where SimGrid would
need the protocol ported onto its actors (or the watcher run under it) and a platform model whose
network detail (latency, bandwidth) does not matter at one small datagram per period and link.
"""
from __future__ import annotations

import argparse
import heapq
import random
import sys
from typing import NamedTuple

from ..runtime.failure.protocol import Member
from ..util import settings
from ..util.args.parser import OneLineParser
from ..util.args.types import positive_int
from ..util.args.vocabulary import add_seed
from ..util.progress import Progress

#: The figures the detector must meet (issue 45).
MAX_RATE, MAX_P99 = 5.0, 30.0
_DELIVER, _TICK, _STALL = 0, 1, 2  # at one moment, datagrams are read before the tick (the watcher's loop)


class Figures(NamedTuple):
    """One run's figures: datagrams sent per node per second, detection times (seconds, sorted),
    false verdicts."""

    rate: float
    detection: list[float]
    false_positives: int


class Sim:
    """``n`` members of one job on a simulated network (see the module docstring)."""

    def __init__(self, n: int, period: float, timeout: float, loss: float, rng: random.Random):
        self.n, self.period, self.loss, self.rng = n, period, loss, rng
        key = rng.randbytes(32)
        self.members = [Member(i, n, key, period, timeout, 0.0) for i in range(n)]
        self.queue: list[tuple[float, int, int, int, bytes]] = []
        self.order = 0
        self.frozen: set[int] = set()
        self.stalled: dict[int, float] = {}  # member -> until when its watcher does not run
        self.known: dict[int, float] = {}    # member -> when it learnt a verdict
        for i in range(n):
            self._push(rng.uniform(0.0, period), _TICK, i, b"")

    def _push(self, at: float, kind: int, who: int, data: bytes) -> None:
        self.order += 1
        heapq.heappush(self.queue, (at, kind, self.order, who, data))

    def _out(self, now: float, sends: list[tuple[int, bytes]]) -> None:
        rng = self.rng
        for to, data in sends:
            if rng.random() >= self.loss:
                self._push(now + rng.uniform(1e-4, 5e-4), _DELIVER, to, data)

    def stall(self, who: int, start: float, seconds: float) -> None:
        """Member ``who``'s watcher does not run from ``start`` for ``seconds``: what falls due to it
        then waits until the stall ends (datagrams queue in its socket)."""
        self._push(start, _STALL, who, repr(seconds).encode())

    def run(self, until: float, stop_when_all_know: bool = False) -> None:
        """Process events up to protocol time ``until`` (or until every live member knows a verdict)."""
        queue, members, stalled, frozen, known = self.queue, self.members, self.stalled, self.frozen, self.known
        live = self.n - len(frozen)
        while queue and queue[0][0] <= until:
            now, kind, _, who, data = heapq.heappop(queue)
            if who in frozen:
                continue
            if kind == _STALL:
                stalled[who] = now + float(data)
                continue
            if who in stalled:
                if now < stalled[who]:  # the watcher runs again at the end of its stall
                    self._push(stalled[who], kind, who, data)
                    continue
                del stalled[who]
            m = members[who]
            if kind == _TICK:
                self._out(now, m.tick(now))
                self._push(now + self.period, _TICK, who, b"")
            else:
                self._out(now, m.receive(data, now))
            if m.verdict is not None and who not in known:
                known[who] = now
                if stop_when_all_know and len(known) >= live:
                    return

    def sent(self) -> int:
        return sum(m.counts["sent"] for m in self.members)


def false_positives(n: int, period: float, timeout: float, loss: float, seconds: float, stall: float,
                    rng: random.Random) -> tuple[float, int]:
    """Datagrams per node per second and the verdicts reached over ``seconds`` with no failure
    (nodes stalling ``stall`` seconds when it is > 0)."""
    sim = Sim(n, period, timeout, loss, rng)
    if stall > 0:
        for who in rng.sample(range(n), max(1, n // 100)):
            sim.stall(who, rng.uniform(0.0, max(0.0, seconds - stall)), stall)
    sim.run(seconds)
    issued = sum(1 for m in sim.members if m.verdict is not None and m.verdict.speaker == m.me)
    return sim.sent() / (n * seconds), issued


def detection(n: int, period: float, timeout: float, loss: float, failures: int,
              rng: random.Random) -> list[float]:
    """Seconds from a node's freeze to each other member's verdict, over ``failures`` trials."""
    times: list[float] = []
    for _ in range(failures):
        sim = Sim(n, period, timeout, loss, rng)
        at = rng.uniform(2 * period, 3 * period)
        sim.run(at)
        sim.frozen.add(rng.randrange(n))
        sim.run(at + 3 * timeout + 20 * period, stop_when_all_know=True)
        live = [i for i in range(n) if i not in sim.frozen]
        times.extend(sim.known[i] - at if i in sim.known else float("inf") for i in live)
    return sorted(times)


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``sorted_values``, nearest rank."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))]


def measure(n: int, period: float, timeout: float, loss: float, stall: float, seconds: float,
            failures: int, seed: int) -> Figures:
    rng = random.Random(f"{seed}-{n}-{loss}-{stall}")
    rate, issued = false_positives(n, period, timeout, loss, seconds, stall, rng)
    return Figures(rate, detection(n, period, timeout, loss, failures, rng), issued)


def line(n: int, fig: Figures) -> str:
    return (f"nodes {n}: {fig.rate:.2f} datagrams per node per second, detection "
            f"p50 {percentile(fig.detection, 0.5):.2f} s p99 {percentile(fig.detection, 0.99):.2f} s, "
            f"false positives {fig.false_positives}")


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction from 0 to below 1 (0.01 is 1 %)")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1e6:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench detector", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=positive_int, nargs="+", default=[64, 4096],
                        help="numbers of nodes (default 64 4096)")
    parser.add_argument("--loss", type=_fraction, default=None, help="datagram loss, e.g. 0.01")
    parser.add_argument("--stall", type=_seconds, default=None, help="seconds a hundredth of the nodes stall")
    parser.add_argument("--seconds", type=_seconds, default=60.0, help="protocol time without failure (default 60)")
    parser.add_argument("--failures", type=positive_int, default=3, help="frozen-node trials (default 3)")
    add_seed(parser, "the simulation's losses, stalls and frozen nodes")
    args = parser.parse_args(argv)
    period = float(settings.value("HPCBSP_HEARTBEAT_PERIOD"))
    timeout = float(settings.value("HPCBSP_HEARTBEAT_TIMEOUT")) or 10.0
    if any(n < 2 for n in args.nodes):
        print("python -m hpcbsp.bench detector: error: --nodes: a job of at least 2 nodes", file=sys.stderr)
        return 2
    cases = [(args.loss or 0.0, args.stall or 0.0)] if args.loss is not None or args.stall is not None \
        else [(0.0, 0.0), (0.01, 0.0), (0.05, 0.0), (0.0, 5.0)]
    print(f"failure detector simulated: period {period:g} s, timeout {timeout:g} s, {args.seconds:g} s "
          f"without failure, {args.failures} frozen-node trials, seed {args.seed}", flush=True)
    ok = True
    show = Progress("bench detector", len(cases) * len(args.nodes), unit="case")
    for loss, stall in cases:
        for n in args.nodes:
            show(cases.index((loss, stall)) * len(args.nodes) + args.nodes.index(n))
            fig = measure(n, period, timeout, loss, stall, args.seconds, args.failures, args.seed)
            what = f"loss {loss:.0%}" + (f", stalls of {stall:g} s" if stall else "")
            print(f"{line(n, fig)} ({what})", flush=True)
            ok &= fig.rate <= MAX_RATE and percentile(fig.detection, 0.99) <= MAX_P99 \
                and (fig.false_positives == 0 or loss > 0.01 or stall > 0)
    print(f"targets (<= {MAX_RATE:g} datagrams per node per second, p99 <= {MAX_P99:g} s, "
          f"no false positive up to 1 % loss): {'met' if ok else 'NOT met'}")
    return 0
