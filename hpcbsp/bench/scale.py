"""A superstep's cost as P grows: neighbour and all-to-all supersteps, their MPI floors, the runtime's work.

Run it without mpiexec: it launches itself under mpiexec at each P of ``--ranks`` (default
4, 8, 16, 32), each job with a timeout, oversubscribed where P exceeds this machine's CPUs (it
says so).  At each P it times, side by side in one job,

* ``neighbour``: every rank puts ``--bytes`` to rank+1 and rank-1 (mod P) and syncs; its floor
  is the same bytes by ``Isend``/``Irecv`` to the two neighbours plus a one-integer
  ``Allreduce`` (what a superstep must cost at least: the data and one meeting);
* ``alltoall``: every rank puts ``--bytes`` to every other rank and syncs; its floor is one
  ``Alltoallv`` of the same bytes;

as the slowest rank's mean per superstep, and counts the runtime's own work in one superstep
(load does not distort counts, as it does times): the MPI calls it makes (through mpi4py, plus
the control step's one, made by compiled code), the bytes it sends that are not the puts'
payload (metadata: counts, headers, the control step's 80-byte record), and the lines of
hpcbsp's Python that rank 0 executes (``sys.settrace`` line events in files under ``hpcbsp/``,
the bench's own excluded).

h-relation of the neighbour superstep: 2 x ``--bytes``; of the all-to-all one: (P - 1) x ``--bytes``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

from hpcbsp.util.progress import Progress

#: The control step's record (10 int64), sent by compiled code the counting cannot see.
CONTROL_BYTES = 80
PATTERNS = ("neighbour", "alltoall")
_HPCBSP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BENCH = os.path.dirname(os.path.abspath(__file__))
_MARK = "SCALE "


def ratio(value: float, floor: float) -> float:
    """``value`` over ``floor`` (NaN where the floor is not positive)."""
    return value / floor if floor > 0 else float("nan")


def growth(lines: dict[int, int], base: int) -> dict[int, float]:
    """Per P, the lines per superstep relative to those at P = ``base``."""
    return {p: ratio(n, lines[base]) for p, n in sorted(lines.items())}


def sent_bytes(spec: Any) -> int:
    """The bytes an mpi4py send-side buffer argument names: an array or bytes-like object,
    ``[buf, type]``, ``[buf, count, type]`` or ``[buf, (counts, displs), type]`` (their sum)."""
    if isinstance(spec, (list, tuple)):
        if len(spec) >= 3 and isinstance(spec[1], (list, tuple)):
            return int(sum(spec[1][0]))
        return sent_bytes(spec[0])
    if spec is None or not hasattr(spec, "__len__") and not hasattr(spec, "nbytes"):
        return 0
    return int(getattr(spec, "nbytes", None) or memoryview(spec).nbytes)


class Counts:
    """What the runtime did in one superstep: MPI calls, bytes sent, Python lines."""

    def __init__(self) -> None:
        self.calls = 1  # the control step (compiled)
        self.sent = CONTROL_BYTES
        self.lines = 0
        self.names: dict[str, int] = {}

    def call(self, name: str) -> None:
        self.calls += 1
        self.names[name] = self.names.get(name, 0) + 1

    def metadata(self, payload: int) -> int:
        """The bytes sent that were not ``payload``."""
        return self.sent - payload


_SENDS = ("Isend", "Issend", "Send", "Ssend", "Alltoall", "Alltoallv", "Allreduce", "Iallreduce", "Ineighbor_alltoallv")
_OTHERS = ("Irecv", "Recv", "Iprobe", "Improbe", "Mprobe", "Probe", "Ibarrier", "Barrier", "Recv_init", "Send_init",
           "Allgather", "allgather", "allreduce", "Dup", "Sendrecv")
_LISTS = ("Waitall", "Waitany", "Waitsome", "Testall", "Testany", "Testsome", "Startall")


def counting_comm(counts: list[Counts]) -> Any:
    """COMM_WORLD as a communicator whose calls (and sends' bytes) add to ``counts[0]`` while it
    holds one (and so do those of the copies a context makes of it)."""
    from mpi4py import MPI

    def adding(name: str, sends: bool) -> Callable[..., Any]:
        base = getattr(MPI.Intracomm, name)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if counts:
                counts[0].call(name)
                if sends:
                    counts[0].sent += sent_bytes(args[0] if args[0] is not MPI.IN_PLACE else args[1])
            return base(self, *args, **kwargs)
        return call

    methods = {name: adding(name, name in _SENDS) for name in _SENDS + _OTHERS if hasattr(MPI.Intracomm, name)}
    return type("Counting", (MPI.Intracomm,), methods)(MPI.COMM_WORLD)


def counting_requests(found: Counts) -> type:
    """``MPI.Request`` with its functions of request lists counted into ``found``."""
    from mpi4py import MPI

    def adding(name: str) -> Any:
        base = getattr(MPI.Request, name)

        def call(cls: type, *args: Any, **kwargs: Any) -> Any:
            found.call(name)
            return base(*args, **kwargs)
        return classmethod(call)

    return type("CountingRequest", (MPI.Request,), {name: adding(name) for name in _LISTS if hasattr(MPI.Request, name)})


def count_one(step: Callable[[], None], counts: list[Counts]) -> Counts:
    """Run ``step`` once, counting hpcbsp's Python lines and the MPI calls it makes (those of a
    communicator made by :func:`counting_comm` and ``MPI.Request``'s functions of request lists;
    a request's own ``Test`` or ``Wait`` is not counted)."""
    from mpi4py import MPI

    found = Counts()

    def lines(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            found.lines += 1
        return lines

    def calls(frame: Any, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        if name.startswith(_HPCBSP) and not name.startswith(_BENCH):
            return lines
        return None

    counts[:] = [found]
    request = MPI.Request
    MPI.Request = counting_requests(found)  # type: ignore[misc,assignment]  # (for this superstep only)
    sys.settrace(calls)
    try:
        step()
    finally:
        sys.settrace(None)
        MPI.Request = request  # type: ignore[misc]
        counts.clear()
    return found


def measure(args: argparse.Namespace) -> int:
    """The launched job: time and count both patterns; rank 0 prints one result line."""
    import numpy as np
    from mpi4py import MPI

    import hpcbsp
    from hpcbsp.bench.sync.common import per_call

    world = MPI.COMM_WORLD
    me, p = world.Get_rank(), world.Get_size()
    n = max(1, args.bytes // 8)
    counts: list[Counts] = []
    # (Counted in a blocking context: a yielding one polls its control step, as often as load says.)
    timed, counted = hpcbsp.BSP(world), hpcbsp.BSP(counting_comm(counts), wait="spin")
    floor_comm = world.Dup()
    result: dict[str, Any] = {"p": p}
    for pattern in PATTERNS:
        dests = sorted({(me + 1) % p, (me - 1) % p} - {me}) if pattern == "neighbour" else \
            [d for d in range(p) if d != me]
        values = np.arange(n, dtype=np.float64) + me
        steps = []
        for bsp in (timed, counted):
            c = bsp.coarray(n * p, np.float64)

            def step(bsp: Any = bsp, c: Any = c) -> None:
                for d in dests:
                    c.put(d, values, offset=me * n)
                bsp.sync()
            steps.append((step, c))
        got = np.empty((p, n))
        sends = [floor_comm.Send_init([values, MPI.DOUBLE], d, 7) for d in dests]
        recvs = [floor_comm.Recv_init([got[s], MPI.DOUBLE], s, 7) for s in dests]
        one = np.ones(1, np.int64)
        if pattern == "neighbour":
            def floor() -> None:
                MPI.Prequest.Startall(recvs + sends)
                MPI.Request.Waitall(recvs + sends)
                floor_comm.Allreduce(MPI.IN_PLACE, one, MPI.MAX)
        else:
            cnt = [0 if d == me else n for d in range(p)]
            displs = [d * n for d in range(p)]
            out = np.tile(values, p)

            def floor() -> None:
                floor_comm.Alltoallv([out, (cnt, displs), MPI.DOUBLE], [got.reshape(-1), (cnt, displs), MPI.DOUBLE])
        best = {"bsp": float("inf"), "floor": float("inf")}
        for _ in range(args.repeats):  # alternately, the best block of each
            best["bsp"] = min(best["bsp"], per_call(steps[0][0], args.iters, world, warmup=5))
            best["floor"] = min(best["floor"], per_call(floor, args.iters, world, warmup=5))
        step_c, c = steps[1]
        for _ in range(3):
            step_c()  # a steady state: the patterns' first supersteps are behind
        found = count_one(step_c, counts)
        expect = np.arange(n, dtype=np.float64)
        ok = all(np.array_equal(c.local[s * n:(s + 1) * n], expect + s) for s in dests)  # (puts are symmetric)
        ok = world.allreduce(ok, op=MPI.LAND)
        stats = world.gather((found.calls, found.metadata(len(dests) * n * 8)), root=0)
        if stats is not None:  # (rank 0)
            result[pattern] = {
                "bsp_us": best["bsp"] * 1e6, "floor_us": best["floor"] * 1e6,
                "calls": found.calls, "metadata_bytes": found.metadata(len(dests) * n * 8),
                "max_calls": max(s[0] for s in stats), "max_metadata_bytes": max(s[1] for s in stats),
                "lines": found.lines, "names": found.names, "correct": bool(ok)}
        for req in sends + recvs:
            req.Free()
    timed.close()
    counted.close()
    floor_comm.Free()
    if me == 0:
        print(_MARK + json.dumps(result), flush=True)
    return 0


def launch(p: int, args: argparse.Namespace, argv: list[str]) -> dict[str, Any] | None:
    """One job of ``p`` ranks; its result, or None (said on stderr) if it failed."""
    from hpcbsp.runtime.launch import find_mpiexec
    from hpcbsp.util.mpiflavour import child_env, local_args, mpiexec_flavour, timeout_env

    mpiexec = find_mpiexec() or "mpiexec"
    flavour = mpiexec_flavour(mpiexec)
    env = child_env(os.environ)
    # Waiting ranks give their cores away (in hpcbsp and inside MPI): on a shared or
    # oversubscribed machine, spinning ranks would time each other's waits.
    env.update({**timeout_env(int(args.timeout)), **flavour.yield_env, "HPCBSP_WAIT": "yield", "PYTHONUNBUFFERED": "1"})
    cmd = [mpiexec, *local_args(flavour), "-n", str(p), sys.executable, "-m", "hpcbsp.bench", "scale", "--inner", *argv]
    try:
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=args.timeout + 30)
    except subprocess.TimeoutExpired:
        print(f"bench scale: the job of {p} ranks did not finish within {args.timeout:g} s", file=sys.stderr)
        return None
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            return dict(json.loads(line[len(_MARK):]))
    print(f"bench scale: the job of {p} ranks failed (status {proc.returncode}): {proc.stderr.strip()[-600:]}",
          file=sys.stderr)
    return None


def rows(results: list[dict[str, Any]]) -> list[str]:
    """The table: one row per P and pattern, and the neighbour lines' growth from the first P."""
    out = [f"{'P':>4} {'pattern':>9} {'bsp us':>9} {'floor us':>9} {'ratio':>6} {'MPI calls':>9} "
           f"{'meta B':>7} {'max meta B':>10} {'py lines':>8}"]
    for r in results:
        for pattern in PATTERNS:
            m = r[pattern]
            out.append(f"{r['p']:>4} {pattern:>9} {m['bsp_us']:9.1f} {m['floor_us']:9.1f} "
                       f"{ratio(m['bsp_us'], m['floor_us']):6.2f} {m['calls']:>9} {m['metadata_bytes']:>7} "
                       f"{m['max_metadata_bytes']:>10} {m['lines']:>8}" + ("" if m["correct"] else "  WRONG DATA"))
    if results:
        base = results[0]["p"]
        grown = growth({r["p"]: r["neighbour"]["lines"] for r in results}, base)
        out.append(f"neighbour superstep's Python lines on rank 0 relative to P = {base}: "
                   + ", ".join(f"{q}: {g:.2f}x" for q, g in grown.items()))
    return out


def parser() -> argparse.ArgumentParser:
    from hpcbsp.util.args.parser import OneLineParser
    from hpcbsp.util.args.types import positive_int, positive_seconds
    from hpcbsp.util.args.vocabulary import add_iters, add_repeats

    p = OneLineParser(prog="python -m hpcbsp.bench scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=_ranks, default=[4, 8, 16, 32], metavar="LIST",
                   help="the values of P, one job each (default 4,8,16,32)")
    p.add_argument("--bytes", type=positive_int, default=64, help="bytes of each put (default 64)")
    add_iters(p, "supersteps in a timed block", default=100)
    add_repeats(p, "timed blocks of each measurement (the best counts)", default=3)
    p.add_argument("--timeout", type=positive_seconds, default=300.0, metavar="S",
                   help="limit for each job (default 300 s)")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # the launched job
    return p


def _ranks(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of rank counts: {text!r}") from None
    if not values or min(values) < 2:
        raise argparse.ArgumentTypeError(f"rank counts must be at least 2: {text!r}")
    return values


def main(argv: list[str]) -> int:
    from hpcbsp.bench import measuring
    from hpcbsp.runtime.launch import detect_launch

    args = parser().parse_args(argv)
    if args.inner:
        return measure(args)
    if detect_launch().launcher != "singleton":
        parser().error("run it without mpiexec: it launches its own job at each P")
    measuring()
    print("bench scale: waiting ranks yield their cores (HPCBSP_WAIT=yield and MPI's own setting)", flush=True)
    cpus = os.cpu_count() or 1
    results = []
    show = Progress("bench scale", len(args.ranks), unit="job", every_s=0.0)
    for p in args.ranks:
        note = f" (oversubscribed: {p} ranks on {cpus} CPUs)" if p > cpus else ""
        print(f"bench scale: P = {p}{note}", flush=True)
        t0 = time.monotonic()
        r = launch(p, args, argv)
        if r is None:
            return 1
        print(f"  done in {time.monotonic() - t0:.0f} s", flush=True)
        results.append(r)
        show(len(results), f"P = {p}")
    print("\n".join(rows(results)))
    return 0 if all(r[q]["correct"] for r in results for q in PATTERNS) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
