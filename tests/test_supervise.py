"""``hpcbsp supervise`` on one machine: what counts as a lost node, which hosts the next launch
gets, the log lines, the exit codes, Ctrl-C and bad arguments.

Oracles: the lines the runtime and the launchers write (held to their sources, so that a change
of wording there fails here), hand-made job endings with the verdict each must get, hand-written
``meta.json`` files, and small fake programs run under plain ``mpiexec -n 2`` (no hpcbsp in them:
they start fast) whose first launch ends as a lost node's would and whose second succeeds.
``--launch srun`` runs against fake ``srun``, ``scontrol`` and ``sinfo`` commands that record
what they were asked.  tests/test_cluster_supervise.py runs the real thing on the emulated nodes.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mpi_helpers import FLAVOUR, clean_env, mpiexec_command

from hpcbsp.cli.supervise import command, job
from hpcbsp.cli.supervise.hosts import choose, is_up
from hpcbsp.cli.supervise.job import Ended, Stop, run_job
from hpcbsp.cli.supervise.signs import Signs
from hpcbsp.cli.supervise.verdict import classify
from hpcbsp.runtime.api.checkpoint import describe
from hpcbsp.util.progress import Progress, parse

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TAG = "[hpcbsp supervise]"

pytestmark = pytest.mark.serial_only


# -- the lines: who writes them, what they say ------------------------------------------------

#: (a line as its producer writes it, the file that writes it, the fixed text of it there).
LOST_LINES = [
    ("[hpcbsp rsh] lost node hpcbsp-node3: the MPI processes there were killed (signal 9)",
     "slurm/local-cluster.sh", "[hpcbsp rsh] lost node \\$host:", "hpcbsp-node3", "the launcher"),
    ("[hpcbsp] node hpcbsp-node2 (rank 1) has not been heard from for 10 s: it died, froze or lost its link; "
     "ending the job (HPCBSP_HEARTBEAT_TIMEOUT=10)",
     "hpcbsp/runtime/failure/lines.py", "has not been heard from for", "hpcbsp-node2", "the failure detector"),
    ("[hpcbsp] node n7 (ranks 4, 5) has not been heard from for 11 s: it died",
     "hpcbsp/runtime/failure/lines.py", "{PREFIX} node {host} ({ranks(node_ranks)})", "n7", "the failure detector"),
    ("[hpcbsp] rank 2/4 (pid 123 on hpcbsp-node3) has been stopped for 10 s (SIGSTOP, or a frozen node); ending",
     "hpcbsp/runtime/failure/lines.py", "has been stopped for", "hpcbsp-node3",
     "the failure detector"),
    ("srun: error: Node failure on hpcbsp-node4", None, None, "hpcbsp-node4", "Slurm"),
]


@pytest.mark.parametrize("line, source, fixed, node, who", LOST_LINES)
def test_the_lines_that_name_a_lost_node(line, source, fixed, node, who):
    if source is not None:
        assert fixed in (REPO / source).read_text(), f"{source} no longer writes {fixed!r}: update signs.py"
    signs = Signs()
    signs.feed(line, now=5.0)
    assert signs.lost == {node: who} and signs.first_loss == 5.0
    assert signs.killed is None and signs.failed is None


def test_timeouts_name_the_nodes_they_waited_for():
    assert "ranks not arrived: " in (REPO / "hpcbsp/runtime/superstep/control.py").read_text()
    supersteps = (REPO / "hpcbsp/runtime/superstep/supersteps.py").read_text()
    assert "timed out after \"\n                f\"{limit:g} s waiting for" in supersteps
    signs = Signs()
    signs.feed("[hpcbsp] rank 0/4: sync at superstep 7 timed out waiting for the other ranks (ranks not arrived: "
               "2 (on hpcbsp-node3), 3 (on hpcbsp-node4)); they are stuck in local work, dead, or never call sync")
    signs.feed("[hpcbsp] rank 1/4: the data exchange of superstep 7 timed out after 8 s waiting for rank 2 "
               "(on hpcbsp-node3); it stopped inside the exchange")
    assert signs.late == ["hpcbsp-node3", "hpcbsp-node4"] and not signs.lost


@pytest.mark.parametrize("line, kind", [
    ("[hpcbsp] rank 1/2 (pid 9 on vm) died without a report: killed by SIGKILL (out of memory, or a kill from outside)",
     "killed"),
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)", "killed"),   # MPICH's hydra
    ("=   KILLED BY SIGNAL: 9 (Killed)", "killed"),                                        # Intel MPI's hydra
    ("=   KILLED BY SIGNAL: 15 (Terminated)", None),     # the launcher passed a SIGTERM on: not a kill
    ("YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated (signal 15)", None),
    ("[hpcbsp] rank 1/2 failed:", "failed"),
    ("[hpcbsp] error: --n must be at least 3", "failed"),
    ("[hpcbsp] rank 0/2 (pid 9 on vm) died without a report: crashed with SIGSEGV", "failed"),
    ("[hpcbsp] rank 1/4 aborted the program at superstep 2: the input is inconsistent", "failed"),  # bsp_abort
    ("[hpcbsp] rank 0/2: stopping because rank 1 failed at superstep 1 with ValueError: boom", None),
])
def test_a_rank_killed_from_outside_and_the_programs_own_failure(line, kind):
    signs = Signs()
    signs.feed(line)
    assert (signs.killed, signs.failed) == ((line, None) if kind == "killed" else (None, line) if kind == "failed"
                                            else (None, None))


def test_under_srun_the_first_killed_task_names_its_node():
    signs = Signs()
    for line in ("srun: error: n3: task 2: Killed", "srun: launch/slurm: _step_signal: Terminating StepId=225.0",
                 "srun: error: n1: task 0: Killed", "srun: error: n4: tasks 3-5: Killed"):
        signs.feed(line)
    assert signs.lost == {"n3": "Slurm (its task was killed)"} and signs.killed == "srun: error: n3: task 2: Killed"
    signs = Signs()
    signs.feed("srun: error: Node failure on n2")
    signs.feed("srun: error: n3: task 2: Killed")
    assert signs.lost == {"n2": "Slurm"}


def test_progress_lines_are_read_back_as_written():
    buf = io.StringIO()
    show = Progress("heat", 400, unit="step", every_s=0.0, stream=buf)
    show(1157)
    show.note("checkpoint written to ck at step 1200")
    Progress("farm", 50, unit="iteration", every_s=0.0, stream=buf, limit=True)(12)
    Progress("x", None, every_s=0.0, stream=buf)(3.5)
    got = [parse(line) for line in buf.getvalue().splitlines()]
    assert [(r.label, r.unit, r.done, r.total) if r else None for r in got] == [
        ("heat", "step", 1157.0, 400.0), None, ("farm", "iteration", 12.0, None), ("x", "", 3.5, None)]
    assert parse("[hpcbsp] rank 1/2 (pid 9 on vm) died without a report") is None


# -- the verdict ------------------------------------------------------------------------------

def _ended(code: int, *lines: str, ended_by: str | None = None) -> Ended:
    signs = Signs()
    for line in lines:
        signs.feed(line)
    return Ended(code, signs, 0.0, 1.0, ended_by)


RSH_LOST = "[hpcbsp rsh] lost node n3: the MPI processes there were killed (signal 9)"
TIMEOUT = "[hpcbsp] rank 0/2: sync at superstep 3 timed out waiting for the other ranks (ranks not arrived: 1 (on n2))"


@pytest.mark.parametrize("ended, silent, spread, kind, nodes", [
    (_ended(0, RSH_LOST), (), True, "done", ()),
    (_ended(130, RSH_LOST, ended_by="interrupt"), (), True, "interrupted", ()),
    (_ended(9, RSH_LOST), (), True, "lost", ("n3",)),
    (_ended(1, RSH_LOST, "[hpcbsp] rank 0/4 failed:"), (), True, "lost", ("n3",)),  # the loss came first
    (_ended(1), ("n4",), True, "lost", ("n4",)),                                        # a host that stopped answering
    (_ended(1, TIMEOUT), (), True, "lost", ("n2",)),
    (_ended(1, TIMEOUT), (), False, "failed", ()),                                      # one machine: the program hangs
    (_ended(2), (), False, "failed", ()),
    (_ended(9, "[hpcbsp] rank 1/2 failed:"), (), False, "failed", ()),
    (_ended(9), (), False, "killed", ()),
    (_ended(137), (), False, "killed", ()),
    (_ended(143, "srun: error: n2: task 1: Killed"), (), True, "lost", ("n2",)),
    (_ended(1, "[hpcbsp] rank 1/2 (pid 9 on n2) died without a report: killed by SIGKILL"), (), True, "killed", ()),
    (_ended(11), (), False, "failed", ()),
    (_ended(1), (), True, "failed", ()),
])
def test_what_is_restarted(ended, silent, spread, kind, nodes):
    verdict = classify(ended, silent, spread=spread)
    assert (verdict.kind, verdict.nodes) == (kind, nodes), verdict.why
    assert verdict.restartable == (kind in ("lost", "killed"))


# -- the hosts of the next launch -------------------------------------------------------------

def test_the_next_launch_leaves_out_silent_hosts_and_for_once_the_lost_one():
    listed = ["a", "b", "c", "d"]
    up = {"a": True, "b": True, "c": True, "d": False}
    assert choose(listed, up, [], 4) == ["a", "b", "c"]
    assert choose(listed, up, ["b"], 4) == ["a", "c"]          # lost by the launch that just failed
    assert choose(listed, up, [], 2) == ["a", "b"]              # at most one per rank asked for
    assert choose(["a", "b"], {"a": True, "b": False}, ["a"], 2) == ["a"]  # nothing else answers: it is used
    assert choose(listed, {}, [], 4) == []


@pytest.mark.parametrize("state, up", [("idle", True), ("alloc", True), ("mix", True), ("comp", True),
                                       ("down*", False), ("down", False), ("idle*", False), ("drain", False),
                                       ("drng", False), ("fail", False), ("idle~", False), ("unk*", False)])
def test_slurm_node_states(state, up):
    assert is_up(state) == up


# -- the checkpoint a restart resumes from ----------------------------------------------------

def _meta(path: Path, superstep: int, nprocs: int) -> None:
    path.mkdir(parents=True)
    (path / ".hpcbsp-checkpoint").write_text("hpcbsp-checkpoint 1\n")
    (path / "meta.json").write_text(json.dumps({"format": "hpcbsp-checkpoint", "version": 1, "program": "fake",
                                                "superstep": superstep, "nprocs": nprocs, "coarrays": {},
                                                "state": {}, "checksums": {}}))


def test_a_checkpoint_is_described_by_its_meta_json(tmp_path):
    assert describe(tmp_path / "none") is None
    _meta(tmp_path / "ck", 120, 4)
    saved = describe(tmp_path / "ck")
    assert saved is not None and (saved.superstep, saved.nprocs, saved.program) == (120, 4, "fake")
    assert abs(saved.written - time.time()) < 60
    (tmp_path / "ck").rename(tmp_path / "ck.old")  # a save interrupted between its two renames
    assert describe(tmp_path / "ck").path == str(tmp_path / "ck.old")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.json").write_text("{")
    assert describe(tmp_path / "bad") is None


def test_the_checkpoint_is_read_from_the_programs_arguments():
    assert command.checkpoint_of(["python", "-m", "app", "--checkpoint", "ck", "--every", "5"]) == "ck"
    assert command.checkpoint_of(["python", "app.py", "--checkpoint=/a/b"]) == "/a/b"
    assert command.checkpoint_of(["python", "app.py"]) is None


# -- end to end on this machine, under plain mpiexec -n 2 -------------------------------------

#: What each MPI's mpiexec says, and its exit status, when one of its ranks was killed by SIGKILL
#: (run by hand: MPICH 5.0.2, Open MPI 5.0.11, Intel MPI 2021.18).
KILLED_SAID, KILLED_EXIT = {
    "mpich": ("EXIT STRING: Killed (signal 9)", 9),
    "openmpi": ("exited on\nsignal 9 (Killed)", 137),
    "impi": ("KILLED BY SIGNAL: 9 (Killed)", 255),
}.get(FLAVOUR.name, (None, None))
_KNOWN_KILL = pytest.mark.skipif(KILLED_EXIT is None, reason=f"how {FLAVOUR.title}'s mpiexec reports a killed rank "
                                                             "is not known here")

#: A fake program (``fake.py MODE FAILS [--checkpoint DIR]``): each rank says which launch it is;
#: on the first FAILS launches rank 1 ends as MODE says (kill: SIGKILL, as every process of a lost
#: node is; lost: the launcher's line for a lost node, then exit 1; raise: exit 1 after the
#: runtime's failure report; usage: exit 2; sleep: both ranks wait); with --checkpoint, the first
#: launch writes a checkpoint's meta.json (superstep 120) and a progress line (step 157) first;
#: with --per-run too, the checkpoint is one of a run's inside DIR, as the trainer keeps them
#: (DIR/mpi-asp-r0, written by a one-rank context: superstep 0, 1 rank).
FAKE = """\
import json, os, signal, sys, time
mode, fails = sys.argv[1], int(sys.argv[2])
rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
launch = int(os.environ["HPCBSP_SUPERVISE_RESTART"])
print(f"rank {rank} launch {launch}", flush=True)
ck = sys.argv[sys.argv.index("--checkpoint") + 1] if "--checkpoint" in sys.argv else None
if ck and rank == 0 and launch == 0:
    superstep, nprocs = (0, 1) if "--per-run" in sys.argv else (120, 2)
    if "--per-run" in sys.argv:
        ck = os.path.join(ck, "mpi-asp-r0")
    os.makedirs(ck)
    open(os.path.join(ck, ".hpcbsp-checkpoint"), "w").close()
    json.dump({"format": "hpcbsp-checkpoint", "version": 1, "program": "fake", "superstep": superstep,
               "nprocs": nprocs, "coarrays": {}, "state": {}, "checksums": {}}, open(os.path.join(ck, "meta.json"), "w"))
    print("[fake] step 157/400 (39%, 2.0 s elapsed, ~3.1 s left)", file=sys.stderr, flush=True)
if mode == "sleep":
    open(f"pid{rank}", "w").write(str(os.getpid()))
    time.sleep(60)
time.sleep(0.3)
if launch < fails and rank == 1:
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "lost":
        print("[hpcbsp rsh] lost node fakenode: the MPI processes there were killed (signal 9)", file=sys.stderr)
        sys.exit(1)
    if mode == "raise":
        print("[hpcbsp] rank 1/2 failed:", file=sys.stderr)
        sys.exit(1)
    if mode == "usage":
        print("fake: error: --n must be at least 3", file=sys.stderr)
        sys.exit(2)
time.sleep(0.3)
"""


def _supervise(tmp_path: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "fake.py").write_text(FAKE)
    return subprocess.run([PYTHON, "-m", "hpcbsp", "supervise", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=env or clean_env(MPIEXEC_TIMEOUT="60"),
                          stdin=subprocess.DEVNULL)


def _said(out: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.startswith(TAG)]


@_KNOWN_KILL
def test_a_rank_killed_from_outside_is_relaunched_with_the_same_arguments(tmp_path):
    out = _supervise(tmp_path, "-n", "2", "--", "python", "fake.py", "kill", "1", "--checkpoint", "ck", "--restart")
    said = _said(out)
    assert out.returncode == 0, out.stderr
    assert sorted(re.findall(r"rank \d launch \d", out.stdout)) == [
        "rank 0 launch 0", "rank 0 launch 1", "rank 1 launch 0", "rank 1 launch 1"]
    assert [line.split(":")[0] for line in said] == [
        f"{TAG} launch 1 (restarts left", f"{TAG} restart 1 of 3, {said[1].split(', ')[1].split(':')[0]}",
        f"{TAG} launch 2 (restarts left", f"{TAG} the job finished (exit 0) after 1 restart"]
    assert re.match(rf"{re.escape(TAG)} restart 1 of 3, \d+\.\d s after the failure: ", said[1]), said[1]
    assert said[0].endswith("2 ranks on this machine: " + " ".join([*mpiexec_command(2), "python", "fake.py", "kill",
                                                                      "1", "--checkpoint", "ck", "--restart"]))
    restart = said[1]
    assert "a rank was killed from outside (SIGKILL" in restart and f"no node was named; exit {KILLED_EXIT}" in restart
    assert "relaunching from checkpoint ck at superstep 120 (saved on 2 ranks, " in restart, restart
    assert restart.endswith("about 37 steps lost (the job's last progress line said step 157/400)"), restart
    # the job's own output passed through
    assert "[fake] step 157/400" in out.stderr and KILLED_SAID in out.stdout + out.stderr


@_KNOWN_KILL
def test_a_programs_own_checkpoints_inside_the_folder_are_named_without_steps(tmp_path):
    # The trainer keeps one checkpoint per run inside --checkpoint DIR, each written by a
    # one-rank context: the restart line names the newest, and no steps lost from its superstep.
    out = _supervise(tmp_path, "-n", "2", "--", "python", "fake.py", "kill", "1", "--checkpoint", "ck", "--restart",
                     "--per-run")
    assert out.returncode == 0, out.stderr
    restart = _said(out)[1]
    assert "relaunching from the checkpoints in ck (the newest, mpi-asp-r0, saved on 1 rank, " in restart, restart
    assert restart.endswith("s before the failure); the job's last progress line said step 157/400"), restart


def test_a_lost_node_named_by_the_launcher_is_restarted(tmp_path):
    out = _supervise(tmp_path, "-n", "2", "--max-restarts", "1", "--", "python", "fake.py", "lost", "1")
    said = _said(out)
    assert out.returncode == 0, out.stderr
    assert "restart 1 of 1" in said[1] and "lost node fakenode (said by the launcher)" in said[1], said
    assert "relaunching from the start (the command gives no --checkpoint DIR); steps lost: not known" in said[1]


@_KNOWN_KILL
def test_restarts_end_at_the_limit_with_the_programs_exit_code(tmp_path):
    out = _supervise(tmp_path, "-n", "2", "--max-restarts", "1", "--", "python", "fake.py", "kill", "9")
    said = _said(out)
    assert out.returncode == KILLED_EXIT, out.stderr
    assert len([s for s in said if " launch " in s]) == 2
    assert said[-1].endswith(f"no restart left (--max-restarts 1): giving up (exit {KILLED_EXIT})"), said


@pytest.mark.parametrize("mode, code, why", [
    ("raise", 1, "exit 1: the program failed ([hpcbsp] rank 1/2 failed:)"),
    ("usage", 2, "exit 2: a usage error or bad input"),
])
def test_the_programs_own_failure_is_not_restarted(tmp_path, mode, code, why):
    out = _supervise(tmp_path, "-n", "2", "--", "python", "fake.py", mode, "1", "--checkpoint", "ck")
    said = _said(out)
    assert out.returncode == code, out.stderr
    assert said[0].startswith(f"{TAG} warning: the command has --checkpoint ck but no --restart")
    assert len([s for s in said if " launch " in s]) == 1
    assert said[-1].startswith(f"{TAG} the job failed, not because a node was lost: {why}"), said
    assert said[-1].endswith(f"not restarting (exit {code})")


def test_ctrl_c_ends_the_job_and_the_supervisor_without_a_restart(tmp_path):
    (tmp_path / "fake.py").write_text(FAKE)
    proc = subprocess.Popen([PYTHON, "-m", "hpcbsp", "supervise", "-n", "2", "--", "python", "fake.py", "sleep", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=clean_env(MPIEXEC_TIMEOUT="60"), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ((tmp_path / "pid0").exists() and (tmp_path / "pid1").exists()):
            assert proc.poll() is None and time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        time.sleep(0.2)
        pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    said = [line for line in err.splitlines() if line.startswith(TAG)]
    assert said[-1] == f"{TAG} interrupted (Ctrl-C): the job was ended; no restart", said
    assert len([s for s in said if " launch " in s]) == 1
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], pid


def test_hosts_that_do_not_answer_are_left_out(tmp_path):
    if shutil.which("ssh") is None:
        pytest.skip("no ssh here: a host that is not this machine is checked with ssh")
    (tmp_path / "hosts").write_text("localhost\nnosuchhost.invalid\n")
    out = _supervise(tmp_path, "--hosts", "hosts", "--", "python", "fake.py", "kill", "0")
    said = _said(out)
    assert out.returncode == 0, out.stderr
    assert re.match(rf"{re.escape(TAG)} launch 1 \(restarts left: 3\): 1 rank on localhost; left out: "
                    r"nosuchhost.invalid \(does not answer: (refused, exit \d+|timed out, 8 s)\): ", said[0]), said
    # one rank on the host that answers, in this MPI's words (docs/cluster.md), given as a host file
    # in a private folder that is gone once the supervisor has ended
    flag = "--hostfile" if FLAVOUR.name == "openmpi" else "-f"
    one_rank_there = "--map-by ppr:1:node" if FLAVOUR.name == "openmpi" else "-ppn 1"
    found = re.search(rf" {flag} (\S+/hpcbsp-supervise-[^/ ]+)/launch.hosts {one_rank_there} -n 1 python fake.py", said[0])
    assert found, said[0]
    assert not Path(found.group(1)).exists()


@pytest.mark.parametrize("args, needle", [
    ([], "give the program after --"),
    (["-n", "2"], "give the program after --"),
    (["--", "true"], "give -n RANKS"),
    (["-n", "0", "--", "true"], "argument -n: '0' is not a positive integer"),
    (["--max-restarts", "-1", "-n", "2", "--", "true"], "argument --max-restarts: '-1' must be >= 0"),
    (["--max-restarts", "2.5", "-n", "2", "--", "true"], "argument --max-restarts"),
    (["--hosts", "missing", "--", "true"], "host file missing: cannot read it"),
    (["--hosts", "hosts", "-n", "3", "--", "true"], "-n 3: host file hosts lists 2 hosts, and each rank needs one"),
    (["--hosts", "hosts", "--launch", "srun", "--", "true"], "--hosts FILE is for mpiexec"),
    (["--launch", "srun", "--", "true"], "SLURM_JOB_NODELIST is not set"),
    (["--launch", "ssh", "--", "true"], "argument --launch: invalid choice: 'ssh'"),
    (["-n", "2", "--", "no-such-program-here"], "program 'no-such-program-here' not found"),
    (["-n", "2", "--max", "1", "--", "true"], "unrecognized arguments: --max"),
])
def test_bad_arguments_one_line_exit_2_nothing_started(tmp_path, args, needle, under=None):
    (tmp_path / "hosts").write_text("a\nb\n")
    stubs = tmp_path / "stubs"  # an srun that is never run: the checks refuse before any launch
    stubs.mkdir()
    (stubs / "srun").write_text("#!/bin/sh\necho srun was run >&2\nexit 99\n")
    (stubs / "srun").chmod(0o755)
    env = clean_env(slurm=True, PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}", **(under or {}))
    out = _supervise(tmp_path, *args, env=env)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr, out.stderr
    assert out.stderr.startswith("hpcbsp supervise: error: ") and not out.stdout


def test_srun_missing_is_one_line_exit_2(tmp_path):
    only_true = tmp_path / "bin"  # a PATH with the program and no srun (the machine may have one)
    only_true.mkdir()
    (only_true / "true").symlink_to(shutil.which("true"))
    out = _supervise(tmp_path, "--launch", "srun", "--", "true", env=clean_env(slurm=True, PATH=str(only_true)))
    assert out.returncode == 2, out.stderr
    assert out.stderr == "hpcbsp supervise: error: --launch srun: no srun on PATH (see hpcbsp supervise --help)\n"


def test_it_is_not_run_under_a_launcher(tmp_path):
    test_bad_arguments_one_line_exit_2_nothing_started(tmp_path, ["-n", "2", "--", "true"],
                                                       "run it on its own, not under mpiexec", {"PMI_RANK": "0"})


def test_help_says_what_is_restarted_and_how(tmp_path):
    out = _supervise(tmp_path, "--help")
    assert out.returncode == 0 and not out.stderr
    for words in ("--max-restarts N", "--hosts FILE", "--launch {mpiexec,srun}", "-n RANKS", "--restart",
                  "Ctrl-C", "exit 2", "HPCBSP_SUPERVISE_RESTART", "example", "docs/cluster.md"):
        assert words in out.stdout, words
    top = subprocess.run([PYTHON, "-m", "hpcbsp", "--help"], capture_output=True, text=True, timeout=60)
    assert "hpcbsp supervise [--max-restarts N]" in top.stdout


# -- --launch srun, against fake Slurm commands -----------------------------------------------

FAKE_SLURM = {
    "scontrol": "#!/bin/sh\necho a b c\n",
    "sinfo": "#!/bin/sh\ncat \"$(dirname \"$0\")/states\"\n",
    # Each call records its arguments and replays the next ending of the script "endings":
    # a line "CODE MESSAGE", MESSAGE to stderr, and "STATES" the node states from then on.
    "srun": f"""#!{PYTHON}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls"), "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
n = sum(1 for _ in open(os.path.join(here, "calls")))
code, message, states = open(os.path.join(here, "endings")).read().splitlines()[n - 1].split("|")
if message:
    print(message, file=sys.stderr)
if states:
    open(os.path.join(here, "states"), "w").write(states.replace(";", "\\n") + "\\n")
sys.exit(int(code))
""",
}


#: srun's PMI plugin for the MPI of these tests (Open MPI 5 has no PMI-2 client: docs/cluster.md).
SRUN_MPI = "--mpi=pmix" if FLAVOUR.name == "openmpi" else "--mpi=pmi2"


def _fake_slurm(tmp_path: Path, endings: list[str]) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in FAKE_SLURM.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "states").write_text("a idle\nb idle\nc idle\na idle\n")  # (a in two partitions)
    (bin_dir / "endings").write_text("\n".join(endings) + "\n")
    return clean_env(slurm=True, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_NODELIST="a,b,c")


def _calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "bin" / "calls").read_text().splitlines()]


def test_srun_steps_leave_out_the_lost_node_and_take_it_back_once_it_is_up(tmp_path):
    env = _fake_slurm(tmp_path, [
        "1|srun: error: Node failure on b|a idle;b down*;c idle",  # b fails, and Slurm marks it down
        "137|slurmstepd: error: task 1 killed|a mix;b idle;c mix",  # b is back; a rank killed, no node named
        "0||",
    ])
    out = _supervise(tmp_path, "--launch", "srun", "--", "true", env=env)
    said = _said(out)
    assert out.returncode == 0, out.stderr
    assert _calls(tmp_path) == [
        ["-N", "3", "-n", "3", SRUN_MPI, "--kill-on-bad-exit=1", "true"],
        ["-N", "2", "-n", "2", SRUN_MPI, "--kill-on-bad-exit=1", "--exclude=b", "true"],
        ["-N", "3", "-n", "3", SRUN_MPI, "--kill-on-bad-exit=1", "true"],
    ]
    assert "lost node b (said by Slurm); relaunching 2 ranks on a,c " in said[1], said
    assert "left out: b (lost by the last launch)" in said[2]
    assert "a rank was killed from outside" in said[3] and "relaunching 3 ranks on a,b,c" in said[3], said


def test_srun_a_node_that_is_down_before_the_launch_is_left_out(tmp_path):
    env = _fake_slurm(tmp_path, ["0||"])
    (tmp_path / "bin" / "states").write_text("a idle\nb drain\nc idle*\n")
    out = _supervise(tmp_path, "--launch", "srun", "-n", "2", "--", "true", env=env)
    assert out.returncode == 0, out.stderr
    assert _calls(tmp_path) == [["-N", "1", "-n", "1", SRUN_MPI, "--kill-on-bad-exit=1", "--exclude=b,c", "true"]]
    assert "left out: b (is down in sinfo), c (is down in sinfo)" in _said(out)[0]


# -- one launch: its end is bounded -----------------------------------------------------------

def _launch(code: str, stop: Stop | None = None) -> tuple[Ended, bytes, float]:
    out, err = io.BytesIO(), io.BytesIO()
    t0 = time.monotonic()
    ended = run_job([PYTHON, "-c", code], clean_env(), stop or Stop(), out=out, err=err)
    return ended, out.getvalue() + err.getvalue(), time.monotonic() - t0


def test_a_job_that_goes_on_after_it_lost_a_node_is_ended(monkeypatch):
    monkeypatch.setattr(job, "LOSS_GRACE", 0.5)
    monkeypatch.setattr(job, "STOP_GRACE", 0.5)
    # a launcher that says it lost a node, then ignores SIGINT and hangs: SIGKILL ends it
    ended, output, took = _launch("import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                                  "print('[hpcbsp rsh] lost node n2: gone', file=sys.stderr, flush=True); time.sleep(60)")
    assert took < 20 and ended.ended_by == "loss" and ended.code == 128 + signal.SIGKILL, (took, ended)
    assert ended.signs.lost == {"n2": "the launcher"} and b"lost node n2" in output


def test_the_output_is_read_until_the_launcher_ends_and_a_little_after(monkeypatch):
    monkeypatch.setattr(job, "DRAIN_S", 0.5)
    # the launcher ends; a process it left behind holds the pipes open for a minute
    ended, output, took = _launch("import subprocess, sys; print('partial line', end='', flush=True); "
                                  "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); sys.exit(3)")
    assert took < 20 and ended.code == 3 and ended.ended_by is None, (took, ended)
    assert output == b"partial line"


def test_an_interrupt_is_passed_to_the_launcher_as_sigint(tmp_path):
    stop, ready = Stop(), tmp_path / "ready"

    def ctrl_c() -> None:  # as the supervisor's handler does, once the launcher listens
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.signum = signal.SIGINT

    threading.Thread(target=ctrl_c, daemon=True).start()
    ended, output, took = _launch(f"import time\ntry:\n    open({str(ready)!r}, 'w').close()\n    time.sleep(60)\n"
                                  "except KeyboardInterrupt:\n    print('got SIGINT', flush=True)\n    raise SystemExit(7)", stop)
    assert took < 30 and ended.ended_by == "interrupt" and ended.code == 7 and b"got SIGINT" in output, output
