"""The scripts in slurm/ against a real Slurm (``slurm/local-cluster.sh start`` sets one up as root).

Every test submits real jobs (``sbatch``, ``srun``) with a few tasks and checks what they
left behind: logs, files, and the job's state as Slurm records it. Without a responding Slurm the
whole file skips and says why. The jobs run in ``tmp_path`` (their submit directory) with this
interpreter's virtualenv as ``HPCBSP_VENV``.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_helpers import FINAL_STATES, job_records, skip_or_fail, wait_final
from mpi_helpers import clean_env, mpich_only

REPO = Path(__file__).resolve().parents[1]
SLURM = REPO / "slurm"
VENV = Path(sys.prefix)
PYTHON = str(VENV / "bin" / "python")

def _slurm_unavailable() -> str | None:
    """Why no test here can run, or None when a Slurm answers with a usable node."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no Slurm here: sinfo/sbatch not on PATH (as root, `slurm/local-cluster.sh start` sets one up)"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=15,
                              env=_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s: slurmctld is not responding"
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    if not set(proc.stdout.split()) & {"idle", "mix", "alloc"}:
        return f"Slurm answers but no node is usable (states: {' '.join(proc.stdout.split()) or 'none'})"
    if not (VENV / "bin" / "activate").exists():
        return f"the scripts activate a virtualenv, but this Python ({sys.prefix}) is not in one"
    return None


def _env(**extra: str) -> dict[str, str]:
    """No launcher or MPI variables of an enclosing job or mpiexec leak into ours."""
    return clean_env(slurm=True, **{"HPCBSP_VENV": str(VENV), "PYTHONUNBUFFERED": "1", **extra})


pytestmark = [pytest.mark.slurm,
              mpich_only("the batch scripts and these tests use srun --mpi=pmi2 (Open MPI needs pmix, Intel MPI "
                         "I_MPI_PMI_LIBRARY) and MPICH's shared-memory names")]


@pytest.fixture(scope="module", autouse=True)
def _slurm_answers() -> None:
    """Ask Slurm once, when the first test of this file runs (not at import: collecting the
    suite must not wait on a slurmctld); without a usable Slurm every test here skips (under
    CI it fails: CI must test Slurm)."""
    skip_or_fail(_slurm_unavailable())


def _run(cmd: list[str], cwd: Path, *, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env(**env),
                          stdin=subprocess.DEVNULL)


def _sbatch_wait(args: list[str], cwd: Path, *, timeout: float = 180, **env: str) -> tuple[str, bool]:
    """Submit with ``sbatch --parsable`` and wait for the job's end (:func:`wait_final`: every half
    second; ``sbatch --wait`` asks at 2, 10, 42 s ..., so that each of these short jobs took 10 s);
    return the job id and whether it succeeded (every task ``COMPLETED`` with exit code 0, as
    ``sbatch --wait`` returns 0)."""
    proc = _run(["sbatch", "--parsable", *args], cwd, timeout=30, **env)
    match = re.match(r"\s*(\d+)", proc.stdout)
    assert match, f"sbatch printed no job id:\n{proc.stdout}\n{proc.stderr}"
    records = wait_final(match.group(1), timeout)
    return match.group(1), all(r["JobState"] == "COMPLETED" and r["ExitCode"] == "0:0" for r in records)


def _job(job_id: str) -> dict[str, str]:
    return job_records(job_id)[0]


def _log(cwd: Path, name: str, job_id: str) -> str:
    path = cwd / f"{name}-{job_id}.out"
    assert path.exists(), f"no job log {path.name}; files: {sorted(p.name for p in cwd.iterdir())}"
    return path.read_text()


# A BSP program that reports what the runtime and Slurm told each rank; tests compare the two.
WHOAMI = """\
import os
import hpcbsp

def who(bsp):
    total = bsp.allreduce(bsp.pid)
    print(f"rank={bsp.pid} size={bsp.nprocs} sum={total} procid={os.environ.get('SLURM_PROCID')}", flush=True)

hpcbsp.run(who)
"""


def _whoami_lines(text: str) -> list[tuple[int, int, int, int]]:
    return [tuple(map(int, m)) for m in re.findall(r"rank=(\d+) size=(\d+) sum=(\d+) procid=(\d+)", text)]


def _assert_one_world(text: str, n: int, *, by_srun: bool = True) -> None:
    """n ranks of one world of size n. Under srun, Slurm's task id is the rank; mpiexec starts its
    own proxies through Slurm, one step task per node, so there every rank sees SLURM_PROCID 0."""
    lines = sorted(_whoami_lines(text))
    expected_sum = n * (n - 1) // 2
    assert lines == [(r, n, expected_sum, r if by_srun else 0) for r in range(n)], text


# --- srun ----------------------------------------------------------------------------------------

def test_srun_pmi2_runs_a_bsp_program_on_all_tasks(tmp_path: Path) -> None:
    (tmp_path / "whoami.py").write_text(WHOAMI)
    proc = _run(["srun", "--mpi=pmi2", "-n", "2", PYTHON, "whoami.py"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    _assert_one_world(proc.stdout, 2)


def test_srun_without_pmi_fails_with_the_launch_check_error(tmp_path: Path) -> None:
    (tmp_path / "whoami.py").write_text(WHOAMI)
    proc = _run(["srun", "--mpi=none", "-n", "2", PYTHON, "whoami.py"], tmp_path)
    assert proc.returncode != 0
    # Two singleton worlds: neither task may run the program as if it were the whole job.
    assert _whoami_lines(proc.stdout) == [], proc.stdout
    assert "srun started 2 tasks" in proc.stderr and "--mpi=pmi2" in proc.stderr, proc.stderr


def test_hpcbsp_info_under_srun_reports_the_job(tmp_path: Path) -> None:
    job_id, ok = _sbatch_wait(["-n", "2", str(SLURM / "run.sbatch"), "-m", "hpcbsp", "info", "--json"],
                              tmp_path)
    log = _log(tmp_path, "hpcbsp", job_id)
    assert ok, log
    info = json.loads(log[log.index("{"):log.rindex("}") + 1])
    job = _job(job_id)
    assert info["launcher"] == "srun"
    assert info["world_size"] == 2 and info["slurm_ntasks"] == 2
    assert info["slurm_job_id"] == job_id
    assert info["slurm_nodelist"] == job["NodeList"]


# --- run.sbatch ----------------------------------------------------------------------------------

@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_run_sbatch_runs_one_program_on_all_tasks(tmp_path: Path, launcher: str) -> None:
    (tmp_path / "whoami.py").write_text(WHOAMI)
    job_id, ok = _sbatch_wait(["-n", "3", str(SLURM / "run.sbatch"), "whoami.py"], tmp_path,
                              HPCBSP_LAUNCHER=launcher)
    log = _log(tmp_path, "hpcbsp", job_id)
    assert ok, log
    assert f"via {launcher}" in log
    _assert_one_world(log, 3, by_srun=launcher == "srun")
    assert _job(job_id)["JobState"] == "COMPLETED"


def test_run_sbatch_rejects_a_missing_virtualenv(tmp_path: Path) -> None:
    job_id, ok = _sbatch_wait([str(SLURM / "run.sbatch"), "-c", "pass"], tmp_path,
                              HPCBSP_VENV=str(tmp_path / "nowhere"))
    assert not ok
    assert "no virtualenv at" in _log(tmp_path, "hpcbsp", job_id)
    assert _job(job_id)["JobState"] == "FAILED"


# Rank 1 fails while the others wait for it in a superstep. "raise": an exception, which the
# runtime reports and turns into a failure on every rank; "crash": the process dies without a
# word (as on a segfault or the OOM killer), and srun --kill-on-bad-exit ends the others.
FAILING = {
    "raise": """\
import hpcbsp

def prog(bsp):
    bsp.sync()
    if bsp.pid == 1:
        raise ValueError("rank one gives up")
    bsp.sync()

hpcbsp.run(prog)
""",
    "crash": """\
import os
import hpcbsp

def prog(bsp):
    bsp.sync()
    if bsp.pid == 1:
        os._exit(3)
    bsp.sync()

hpcbsp.run(prog)
""",
}


@pytest.mark.parametrize("how", sorted(FAILING))
def test_a_rank_that_fails_fails_the_job(tmp_path: Path, how: str) -> None:
    (tmp_path / "fail.py").write_text(FAILING[how])
    # --time=2: should the failure not end the job, the test fails in two minutes instead of
    # hanging. (One minute was once used up, with no output at all, by 3 ranks starting Python on
    # a 2-core machine loaded by other test runs; a working run ends in about 10 s.)
    job_id, ok = _sbatch_wait(["-n", "3", "--time=2", str(SLURM / "run.sbatch"), "fail.py"], tmp_path,
                              timeout=240)
    log = _log(tmp_path, "hpcbsp", job_id)
    assert not ok, log
    job = _job(job_id)
    assert job["JobState"] == "FAILED", (job, log)
    assert job["ExitCode"].split(":")[0] != "0", job
    assert ("rank one gives up" if how == "raise" else "task 1: Exited with exit code 3") in log, log
    # sacct too, where this Slurm keeps a record: slurmdbd (plain `sacct`) or jobcomp/filetxt
    # (`sacct -c`, what the local cluster has).
    config = _run(["scontrol", "show", "config"], tmp_path, timeout=30).stdout
    for cmd, kept in ((["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", job_id],
                       not re.search(r"AccountingStorageType\s*=\s*accounting_storage/none", config)),
                      (["sacct", "-c", "-n", "-P", "-o", "JobID,State"],
                       bool(re.search(r"JobCompType\s*=\s*jobcomp/filetxt", config)))):
        if kept:
            acct = _run(cmd, tmp_path, timeout=30)
            rows = [line.split("|") for line in acct.stdout.splitlines()]
            assert [row[1] for row in rows if row[0] == job_id] == ["FAILED"], (cmd, acct.stdout, acct.stderr)


# --- sweep ---------------------------------------------------------------------------------------

# Stands in for a program that is not an hpcbsp farm: the K workers share a fixed amount of
# sleeping; the sweep can only time the whole step.
SLEEPY_FARM = """\
import time
from mpi4py import MPI
comm = MPI.COMM_WORLD
if comm.Get_rank() > 0:
    time.sleep(0.6 / (comm.Get_size() - 1))
comm.Barrier()
"""


def _csv(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().split()
    header = lines[0].split(",")
    return [dict(zip(header, line.split(","))) for line in lines[1:]]


def test_sweep_array_times_each_worker_count(tmp_path: Path) -> None:
    (tmp_path / "farm.py").write_text(SLEEPY_FARM)
    proc = _run(["sbatch", "--parsable", "--array=1-3%1", "--ntasks=4", str(SLURM / "sweep-point.sbatch"),
                 "farm.py"], tmp_path, timeout=30, SWEEP_REPS="2")
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split(";")[0].strip()
    tasks = wait_final(job_id, timeout=180)
    assert sorted((t["ArrayTaskId"], t["JobState"]) for t in tasks) == [(k, "COMPLETED") for k in "123"], tasks
    points = tmp_path / "runs" / f"sweep-{job_id}" / "points"
    for k in (1, 2, 3):
        rows = [line.split(",") for line in (points / f"K{k}.csv").read_text().split()]
        assert [(int(w), n, timer) for w, _, n, timer in rows] == [(k, "", "wall")] * 2
        # The step's wall time includes the program's sleep, so it can never be shorter.
        assert all(float(s) >= 0.6 / k for _, s, _, _ in rows), rows


def test_sweep_point_refuses_too_few_tasks(tmp_path: Path) -> None:
    job_id, ok = _sbatch_wait(["--array=3", "--ntasks=2", str(SLURM / "sweep-point.sbatch"), "-c", "pass"],
                              tmp_path)
    assert not ok
    assert "K=3 needs 4 tasks but the job has 2" in _log(tmp_path, "hpcbsp-sweep", f"{job_id}_3")


def test_sweep_sh_rejects_bad_input(tmp_path: Path) -> None:
    proc = _run([str(SLURM / "sweep.sh"), "--workers", "1,x"], tmp_path, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--workers" in proc.stderr, proc.stderr


def _missing_for_full_sweep() -> str | None:
    for module, what in (("hpcbsp.cli.cost", "hpcbsp-cost (hpcbsp/cli/cost.py, issue 5)"),
                         ("hpcbsp.apps.bsf.jacobi", "the BSF farm app hpcbsp.apps.bsf.jacobi (issue 5)")):
        try:
            if importlib.util.find_spec(module) is None:
                return f"{what} is not in the package yet"
        except ImportError as exc:
            return f"{what} cannot be imported: {exc}"
    return None


@pytest.mark.skipif(_missing_for_full_sweep() is not None, reason=_missing_for_full_sweep() or "")
def test_sweep_sh_fits_validates_and_plots(tmp_path: Path) -> None:
    n = 300
    proc = _run([str(SLURM / "sweep.sh"), "--workers", "1,2,3", "--reps", "2", "--throttle", "1",
                 "--", "-m", "hpcbsp.apps.bsf.jacobi", "--n", str(n)], tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = re.search(r"fit job (\d+) runs after it", proc.stdout)
    assert match, proc.stdout
    (fit,) = wait_final(match.group(1), timeout=240)
    assert fit["JobState"] == "COMPLETED", _log(tmp_path, "hpcbsp-sweep-fit", fit["JobId"])
    (sweep,) = (tmp_path / "runs").glob("sweep-*")
    runs = _csv(sweep / "RUNS.csv")
    # Two runs at each K, timed by the farm itself on the list the program was given.
    assert sorted(int(r["workers"]) for r in runs) == [1, 1, 2, 2, 3, 3]
    assert all(r["timer"] == "farm" and r["list_length"] == str(n) and float(r["seconds"]) > 0 for r in runs)
    model = json.loads((sweep / "MODEL.json").read_text())
    assert model, "empty model"
    assert (sweep / "validate.txt").read_text().strip()
    assert (sweep / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_sh_fails_when_a_point_fails(tmp_path: Path) -> None:
    # The program fails at K = 2 only: the fit job must never run, and sweep.sh must say so.
    (tmp_path / "bad.py").write_text("import sys\nfrom mpi4py import MPI\nsys.exit(MPI.COMM_WORLD.Get_size() == 3)\n")
    proc = _run([str(SLURM / "sweep.sh"), "--workers", "1,2", "--throttle", "1", "--wait", "--", "bad.py"],
                tmp_path, timeout=180)
    assert proc.returncode != 0
    match = re.search(r"fit job (\d+) ended CANCELLED", proc.stderr)
    assert match, proc.stdout + proc.stderr
    assert _job(match.group(1))["Reason"] == "DependencyNeverSatisfied"
    (sweep,) = (tmp_path / "runs").glob("sweep-*")
    assert sorted(p.name for p in (sweep / "points").glob("K*.csv")) == ["K1.csv", "K2.csv"]
    assert not (sweep / "RUNS.csv").exists()


# --- long-run.sbatch -----------------------------------------------------------------------------

# A program of type (a) in long-run.sbatch: on SIGUSR1 it saves a checkpoint at the end of the
# current superstep (the ranks agree on it through an allreduce) and exits 0. Every superstep
# each rank adds pid + 1 to its part of a coarray, so after `total` supersteps, however they were
# split between runs, every element is total * (pid + 1).
COUNTER = """\
import os, signal, sys, time
import numpy as np
import hpcbsp

asked = False

def ask(signum, frame):
    global asked
    asked = True

signal.signal(signal.SIGUSR1, ask)
path, total = os.environ["HPCBSP_CHECKPOINT"], int(sys.argv[1])

def count(bsp):
    acc = bsp.coarray(3, dtype=np.int64, name="acc")
    step = int(bsp.restore(path).state["step"]) if os.path.isdir(path) else 0
    print(f"rank {bsp.pid} starts at step {step}", flush=True)
    while step < total:
        time.sleep(0.05)
        acc.local[:] += bsp.pid + 1
        step += 1
        bsp.sync()
        if bsp.allreduce(int(asked), op="max"):
            bsp.checkpoint(path, step=np.int64(step))
            if bsp.pid == 0:
                print(f"checkpointed at step {step}", flush=True)
            return
        if step == 5 and bsp.pid == 0:
            open("ready", "w").close()
    ok = bool(np.all(acc.local == total * (bsp.pid + 1)))
    print(f"rank {bsp.pid} done at step {step}: acc {'OK' if ok else 'WRONG'}", flush=True)

hpcbsp.run(count)
"""

def _signal_long_run(cwd: Path, args: list[str], ready: Path, *, timeout: float, **env: str) -> dict[str, str]:
    """Submit long-run.sbatch (``args``: sbatch options, the script and its program); once
    ``ready`` exists, send the batch shell what Slurm sends SIGNAL_LEAD seconds before the time
    limit (--signal=B:USR1@...); return the job's record once it has ended for good."""
    proc = _run(["sbatch", "--parsable", *args], cwd, timeout=30, **env)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split(";")[0].strip()
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            state = _job(job_id)["JobState"]
            assert state not in FINAL_STATES, f"job ended ({state}) before its program was ready"
            assert time.monotonic() < deadline, f"the program did not get ready in 60 s (job {state})"
            time.sleep(0.2)
        _run(["scancel", "--batch", "--signal=USR1", job_id], cwd, timeout=30).check_returncode()
        (job,) = wait_final(job_id, timeout)
    finally:
        if _job(job_id)["JobState"] not in FINAL_STATES:
            _run(["scancel", job_id], cwd, timeout=30)
    return job


def test_long_run_requeues_a_program_that_checkpoints_on_the_signal(tmp_path: Path) -> None:
    (tmp_path / "counter.py").write_text(COUNTER)
    total = 80  # about 4 s of supersteps: the signal arrives long before the end
    # The requeued run may start only after cred_expire (10 s on the local cluster).
    job = _signal_long_run(tmp_path, ["-n", "2", str(SLURM / "long-run.sbatch"), "counter.py", str(total)],
                           tmp_path / "ready", timeout=120)
    log = _log(tmp_path, "hpcbsp-long", job["JobId"])
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "1"), log
    (saved,) = map(int, re.findall(r"checkpointed at step (\d+)", log))
    assert 5 <= saved < total, log
    starts = sorted(map(int, re.findall(r"rank \d starts at step (\d+)", log)))
    assert starts == [0, 0, saved, saved], log  # two ranks, fresh and then from the checkpoint
    assert sorted(re.findall(rf"rank (\d) done at step {total}: acc OK", log)) == ["0", "1"], log
    assert "resuming from checkpoint" in log and "requeueing" in log


def test_long_run_requeues_a_program_with_periodic_checkpoints(tmp_path: Path) -> None:
    # Type (b): hpcbsp.apps.heat saves every --every steps and ignores the signal, so the script
    # stops it HPCBSP_STOP_GRACE seconds later; the requeued run restarts from the last checkpoint,
    # and the result must still be bit-identical to the serial numpy run (--check).
    # `{checkpoint}` in the arguments becomes $HPCBSP_CHECKPOINT.
    ckpt = tmp_path / "heat-ckpt"
    steps = 100_000  # a few seconds: the first run is stopped long before the end
    job = _signal_long_run(
        tmp_path, ["-n", "2", str(SLURM / "long-run.sbatch"), "-m", "hpcbsp.apps.heat", "--n", "200",
                   "--steps", str(steps), "--every", "2000", "--checkpoint", "{checkpoint}", "--restart", "--check"],
        ckpt / "meta.json", timeout=180, HPCBSP_CHECKPOINT=str(ckpt), HPCBSP_STOP_GRACE="0")
    log = _log(tmp_path, "hpcbsp-long", job["JobId"])
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "1"), log
    (restarted,) = map(int, re.findall(r"restarted from .* at step (\d+)", log))
    assert 0 < restarted < steps and restarted % 2000 == 0, log
    assert "stopping the program" in log
    # The killed first run left MPICH shared memory named after "<job id>.0", which the second run
    # reuses: the script must have removed it, or MPI_Init would have failed above.
    assert "could not remove stale MPI shared memory" not in log
    assert log.count(f"heat: n=200 steps={steps} on 2 ranks") == 1, log  # only the second run got there
    assert "check against serial numpy: bit-identical" in log, log


def test_long_run_is_not_requeued_without_a_checkpoint(tmp_path: Path) -> None:
    # A program that saves nothing and just exits on the signal.
    (tmp_path / "sleeper.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(0))\n"
        "open('ready', 'w').close()\n"
        "time.sleep(60)\n"
    )
    job = _signal_long_run(tmp_path, ["-n", "1", str(SLURM / "long-run.sbatch"), "sleeper.py"],
                           tmp_path / "ready", timeout=60)
    log = _log(tmp_path, "hpcbsp-long", job["JobId"])
    assert (job["JobState"], job["Restarts"]) == ("FAILED", "0"), log
    assert "saved no checkpoint" in log and "not requeueing" in log, log


@pytest.mark.alone  # its urgent job preempts whatever the debug partition runs on that node
def test_long_run_is_requeued_when_preempted_and_resumes(tmp_path: Path) -> None:
    # A job of the "urgent" partition (a higher PriorityTier, see local-cluster.sh) that needs the
    # whole node preempts the long run: Slurm cancels its step at once, the script requeues the
    # job (exiting instead would end it FAILED), and the requeued run must go on from the last
    # periodic checkpoint to the bit-identical result.
    ckpt = tmp_path / "heat-ckpt"
    steps = 150_000  # about 15 s: the run is preempted within a few seconds of its first checkpoint
    env = {"HPCBSP_CHECKPOINT": str(ckpt), "HPCBSP_STOP_GRACE": "0"}
    proc = _run(["sbatch", "--parsable", "-p", "debug", "-n", "2", str(SLURM / "long-run.sbatch"),
                 "-m", "hpcbsp.apps.heat", "--n", "200", "--steps", str(steps), "--every", "5000",
                 "--checkpoint", "{checkpoint}", "--restart", "--check"], tmp_path, timeout=30, **env)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split(";")[0].strip()
    urgent_id = None
    try:
        deadline = time.monotonic() + 60
        while not (ckpt / "meta.json").exists():  # the first checkpoint is on disk
            assert _job(job_id)["JobState"] not in FINAL_STATES, _job(job_id)
            assert time.monotonic() < deadline, "no checkpoint within 60 s"
            time.sleep(0.2)
        # On the long run's node: on a cluster of several nodes another would be free.
        urgent = _run(["sbatch", "--parsable", "-p", "urgent", "--exclusive", "-n", "1",
                       "-w", _job(job_id)["NodeList"], "--wrap", "echo urgent work done"], tmp_path, timeout=30)
        assert urgent.returncode == 0, urgent.stderr
        urgent_id = urgent.stdout.split(";")[0].strip()
        (job,) = wait_final(job_id, 240)
        (done,) = wait_final(urgent_id, 60)
    finally:
        for jid in (job_id, urgent_id):
            if jid and _job(jid)["JobState"] not in FINAL_STATES:
                _run(["scancel", jid], tmp_path, timeout=30)
    log = _log(tmp_path, "hpcbsp-long", job["JobId"])
    assert done["JobState"] == "COMPLETED"
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "1"), log
    assert re.search(r"program exited with status \d+: the job was preempted at \S+; requeueing", log), log
    (restarted,) = map(int, re.findall(r"restarted from .* at step (\d+)", log))
    assert 0 < restarted < steps and restarted % 5000 == 0, log
    assert "check against serial numpy: bit-identical" in log, log
