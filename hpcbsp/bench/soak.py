"""Soak: the fault and timing-sensitive tests and CLIs, again and again, on a loaded machine.

    python -m hpcbsp.bench soak [--repeats 12] [--hogs 2] [--timeout 300] [--out-dir runs/soak]

Run it from a source checkout (it needs ``tests/``), without mpiexec: while ``--hogs``
processes keep CPUs busy, it runs each item ``--repeats`` times, in turn:

* ``faults``: ``tests/test_runtime_faults.py`` (a rank that raises, crashes, is SIGKILLed, is
  stopped, computes long; aborts, Ctrl-C of a script, SIGUSR1), every test one run;
* ``watch``: ``tests/test_runtime_nodewatch.py`` (the death watch's order, its clean-up, the
  heartbeats);
* ``interrupt``: ``tests/test_runtime_interrupt.py`` (Ctrl-C);
* ``restart``: the heat app's kill-a-rank-then-restart test;
* ``calibrate``: ``hpcbsp-cost calibrate`` of the BSF Jacobi at K = 1, 2 (once hung at K = 2
  under a load of 19).

A run that outlives ``--timeout`` is a **hang**: its ranks are sent SIGUSR1 first (each hpcbsp
rank prints its stacks, prefixed by its rank; the launcher's own processes are spared it,
:func:`hpcbsp.util.proctree.signal_ranks`) and every process of it is killed 3 s later; its output, stacks
included, goes to ``OUT/soak.log`` with that of every failed run.  The summary (a table; and
``OUT/summary.json``) counts runs (for the pytest items, tests), passes, failures and hangs.
Exit status 0 only with no failure and no hang.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..util.args.parser import OneLineParser
from ..util.args.types import positive_int
from ..util.args.vocabulary import add_repeats
from ..util.procstat import job_processes
from ..util.proctree import signal_ranks
from ..util.progress import Progress
from . import measuring

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _items(out: Path) -> dict[str, list[str]]:
    py = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    work = out / "calibrate"
    return {
        "faults": py + [str(TESTS / "test_runtime_faults.py")],
        "watch": py + [str(TESTS / "test_runtime_nodewatch.py")],
        "interrupt": py + [str(TESTS / "test_runtime_interrupt.py")],
        "restart": py + [str(TESTS / "test_runtime_checkpoint.py"), "-k", "kill_a_rank_then_restart"],
        "calibrate": [sys.executable, "-m", "hpcbsp.cli.cost", "calibrate", "--workers", "1,2", "--repeats", "1",
                      "--bootstrap", "0", "--timeout", "120", "--out-dir", str(work), "--",
                      sys.executable, "-m", "hpcbsp.apps.bsf.jacobi", "--n", "300"],
    }


def _hog() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_once(cmd: list[str], timeout: float) -> tuple[str, str, float]:
    """``(outcome, output, seconds)``: outcome ``pass``, ``fail`` or ``hang``."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=ROOT)
        try:
            proc.wait(timeout=timeout)
            outcome = "pass" if proc.returncode == 0 else "fail"
        except subprocess.TimeoutExpired:
            outcome = "hang"
            signal_ranks(job_processes(proc.pid), signal.SIGUSR1)  # the ranks' stacks (not the launcher's)
            time.sleep(3.0)
            for pid in job_processes(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            proc.wait()
        log.seek(0)
        return outcome, log.read(), time.monotonic() - t0


def counts(item: str, outcome: str, output: str) -> tuple[int, int]:
    """``(runs, failures)`` of one run: pytest's own counts for the test items."""
    if item == "calibrate":
        return 1, int(outcome != "pass")
    found = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|error|errors)", output)}
    runs = sum(found.values())
    bad = found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0)
    if outcome != "pass" and bad == 0:
        bad = 1  # a run that ended badly without a count (a hang, a crash of pytest)
    return max(runs, 1), bad


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench soak", description=__doc__.split("\n")[0])
    add_repeats(parser, "runs of each item, in turn (rounds)", default=12)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the runs (default 2)")
    parser.add_argument("--timeout", type=positive_int, default=300,
                        help="seconds after which a run is a hang (default 300)")
    parser.add_argument("--items", default="faults,watch,interrupt,restart,calibrate",
                        help="comma-separated items (default: all)")
    parser.add_argument("--out-dir", default="runs/soak", help="soak.log and summary.json (default runs/soak)")
    args = parser.parse_args(argv)
    if args.hogs < 0:
        parser.error(f"--hogs {args.hogs}: give 0 or more")
    if not TESTS.is_dir():
        print(f"hpcbsp.bench soak: error: no tests/ beside the package ({TESTS}); run it from a source "
              "checkout", file=sys.stderr)
        return 2
    out = Path(args.out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "soak.log").write_text("")
    except OSError as exc:
        print(f"hpcbsp.bench soak: error: --out-dir {out}: {exc.strerror}; give a folder you can write",
              file=sys.stderr)
        return 2
    items = _items(out.resolve())
    chosen = [i.strip() for i in args.items.split(",") if i.strip()]
    unknown = [i for i in chosen if i not in items]
    if unknown or not chosen:
        print(f"hpcbsp.bench soak: error: --items {args.items!r}: choose from {', '.join(items)}", file=sys.stderr)
        return 2
    measuring()
    hogs = [_hog() for _ in range(args.hogs)]
    tally = {i: {"runs": 0, "failed": 0, "hung": 0, "jobs": 0, "seconds": 0.0} for i in chosen}
    print(f"soak: {args.repeats} rounds of {', '.join(chosen)} beside {args.hogs} CPU hogs; "
          f"hang after {args.timeout} s; log {out / 'soak.log'}", flush=True)
    show = Progress("soak", args.repeats * len(chosen), unit="job")
    try:
        for rnd in range(1, args.repeats + 1):
            for item in chosen:
                outcome, output, seconds = run_once(items[item], args.timeout)
                show((rnd - 1) * len(chosen) + chosen.index(item) + 1, f"round {rnd} {item}: {outcome}")
                runs, bad = counts(item, outcome, output)
                t = tally[item]
                t["jobs"] += 1
                t["runs"] += runs
                t["failed"] += bad if outcome != "hang" else 0
                t["hung"] += outcome == "hang"
                t["seconds"] += seconds
                print(f"  round {rnd:3d}  {item:<10s} {outcome:<4s} {runs:3d} run(s)  {seconds:6.1f} s",
                      flush=True)
                if outcome != "pass":
                    with open(out / "soak.log", "a") as log:
                        log.write(f"==== round {rnd} {item}: {outcome} ({seconds:.1f} s)\n{output}\n")
    except KeyboardInterrupt:
        print("soak: interrupted; the summary covers the rounds done", file=sys.stderr)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"\n{'item':<10s} {'jobs':>5s} {'runs':>6s} {'failed':>7s} {'hung':>5s} {'mean s':>7s}")
    for item, t in tally.items():
        mean = t["seconds"] / t["jobs"] if t["jobs"] else 0.0
        print(f"{item:<10s} {t['jobs']:5d} {t['runs']:6d} {t['failed']:7d} {t['hung']:5d} {mean:7.1f}")
    total = {k: sum(t[k] for t in tally.values()) for k in ("runs", "failed", "hung")}
    print(f"total: {total['runs']} runs, {total['failed']} failed, {total['hung']} hung "
          f"(beside {args.hogs} CPU hogs, load average {os.getloadavg()[0]:.1f} at the end)")
    (out / "summary.json").write_text(json.dumps({"hogs": args.hogs, "rounds": args.repeats, "items": tally,
                                                  "total": total}, indent=2))
    return 0 if total["failed"] == 0 and total["hung"] == 0 else 1


if __name__ == "__main__":  # (python -m hpcbsp.bench soak is the way in)
    sys.exit(main(sys.argv[1:]))
