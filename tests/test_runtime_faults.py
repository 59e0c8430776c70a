"""Faults end the job quickly and clearly (subprocesses under mpiexec, each with a timeout)."""
from __future__ import annotations

import os
import re
import socket
import sys
import time

import pytest
from mpi_helpers import run_mpi

from hpcbsp import BSPError
from hpcbsp.runtime.launch import check_world, detect_launch
from hpcbsp.util.mpiflavour import crash_line, running_flavour

HERE = os.path.dirname(__file__)
PROGRAMS = os.path.join(HERE, "programs")


def test_exception_on_one_rank_stops_all_with_one_traceback():
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "fail_one_rank.py")], timeout=60)
    elapsed = time.monotonic() - t0
    assert not res.timed_out and elapsed < 30
    assert res.returncode != 0
    assert res.crash is None, res.output
    assert res.stderr.count("Traceback (most recent call last)") == 1, res.stderr
    assert "[rank 1] ZeroDivisionError: rank one divides by zero" in res.stderr
    assert "UNREACHABLE" not in res.stdout
    # Why the others stop, in one line for the job: the lowest rank that did not fail says it.
    assert res.stderr.count("stopping because rank 1 failed at superstep 1") == 1, res.stderr
    assert "rank 0/3: stopping because rank 1 failed at superstep 1" in res.stderr, res.stderr
    assert "died without a report" not in res.output  # nobody died silently


@pytest.mark.parametrize("how, why", [("segv", "crashed with SIGSEGV"), ("kill", "killed by SIGKILL")])
def test_a_rank_that_dies_silently_is_named(how, why):
    """mpiexec names a PID, often not even the dead rank's; hpcbsp's watcher names the rank."""
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "crash_one_rank.py"), how], timeout=60)
    assert not res.timed_out and time.monotonic() - t0 < 30
    assert res.returncode != 0
    named = [ln for ln in res.stderr.splitlines() if "died without a report" in ln]
    assert len(named) == 1 and named[0].startswith("[hpcbsp] rank 2/3 (pid "), res.output
    # The signal is named when the watcher saw the dead rank before the launcher reaped it; every
    # rank is on this node, so the watch knows rank 2 went first and says so without a doubt.
    assert why in named[0] or "killed by a signal or crashed" in named[0], named
    assert "may have" not in named[0], named
    assert "UNREACHABLE" not in res.stdout


def test_a_rank_asked_to_stop_is_not_reported_as_a_silent_death():
    # SIGTERM to every rank (scancel, a time limit, a launcher passing on Ctrl-C) is not a
    # crash: the launcher says what happened, and no watcher claims a rank "died without a report".
    res = run_mpi(3, [os.path.join(PROGRAMS, "crash_one_rank.py"), "term"], timeout=60)
    assert not res.timed_out and res.returncode != 0
    assert "died without a report" not in res.output, res.output


def test_the_watcher_can_be_turned_off():
    res = run_mpi(3, [os.path.join(PROGRAMS, "crash_one_rank.py"), "kill"], timeout=60,
                  env={"HPCBSP_DEATHWATCH": "0"})
    assert not res.timed_out and res.returncode != 0
    assert "died without a report" not in res.output


def test_exception_while_others_compute_aborts_after_grace():
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "fail_one_rank.py"), "--busy"], timeout=90,
                  env={"HPCBSP_ABORT_GRACE": "2"})
    assert not res.timed_out and time.monotonic() - t0 < 60
    assert res.returncode != 0
    assert "aborting the job" in res.stderr
    assert res.stderr.count("Traceback (most recent call last)") == 1
    assert "died without a report" not in res.output  # the aborting rank said why; peers quiet


def test_python_m_hpcbsp_script_failure_ends_job():
    res = run_mpi(3, ["-m", "hpcbsp", os.path.join(PROGRAMS, "script_fails.py")], timeout=60)
    assert not res.timed_out
    assert res.returncode != 0
    assert res.crash is None, res.output
    assert "[rank 0] KeyError: 'missing key on rank 0'" in res.stderr
    assert res.stderr.count("Traceback (most recent call last)") == 1


def test_srun_without_pmi_gives_a_clear_error():
    # A singleton that Slurm's environment says is one of 2 tasks: what srun without
    # --mpi=pmi2 produces with MPICH (without --mpi=pmix with Open MPI); the message names the
    # plugin of the MPI in use.
    env = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "7"}
    import subprocess
    code = "import hpcbsp\nwith hpcbsp.BSP() as bsp: pass"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env})
    assert res.returncode != 0
    assert f"srun --mpi={running_flavour().srun_mpi}" in res.stderr and "world of size 1" in res.stderr


def test_check_world_cases():
    check_world(1, {})                                         # singleton, nothing said
    check_world(4, {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "4"})
    check_world(1, {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"})
    with pytest.raises(BSPError, match="mpiexec and the MPI library"):
        check_world(1, {"PMI_SIZE": "3", "PMI_RANK": "0"})
    # srun's job-wide SLURM_NTASKS is not the step's: an sbatch job with 4 tasks that runs a
    # singleton step (SLURM_STEP_NUM_TASKS=1) is fine.
    check_world(1, {"SLURM_STEP_ID": "3", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "1"})


def test_detect_launch():
    assert detect_launch({}).launcher == "singleton"
    assert detect_launch({"PMI_RANK": "0"}).launcher == "mpiexec"
    info = detect_launch({"SLURM_STEP_ID": "0", "PMI_RANK": "1", "SLURM_JOB_ID": "12",
                          "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "n[1-2]"})
    assert (info.launcher, info.slurm_job_id, info.slurm_ntasks, info.slurm_nodelist) == \
        ("srun", "12", 2, "n[1-2]")


def test_demo_runs_on_two_ranks():
    res = run_mpi(2, ["-m", "hpcbsp.apps.demo", "--n", "300"], timeout=120)
    assert res.returncode == 0, res.output
    assert "OK" in res.stdout and "ledger:" in res.stdout


def test_info_under_mpiexec_reports_world_and_launcher():
    res = run_mpi(2, ["-m", "hpcbsp", "info", "--json"], timeout=60)
    assert res.returncode == 0, res.output
    import json
    info = json.loads(res.stdout)
    assert info["world_size"] == 2 and info["launcher"] == "mpiexec"
    assert info["kernels"]["cython"] is True
    # The control step: the library's faster allreduce (oracle: the library's name; Open MPI's
    # persistent collectives are the slower there), compiled; or as the variables say.
    faster = "blocking" if "Open MPI" in info["mpi_library"] else "persistent"
    assert info["control_step"] == (f"{faster} MPI_Allreduce (HPCBSP_CONTROL_COLLECTIVE=auto: the faster "
                                    f"under {info['mpi']}), compiled, lateness watch off (HPCBSP_LATENESS)"), info["control_step"]
    res = run_mpi(2, ["-m", "hpcbsp", "info", "--json"], timeout=60,
                  env={"HPCBSP_CONTROL_COLLECTIVE": "blocking", "HPCBSP_COMPILED_SYNC": "0"})
    assert res.returncode == 0, res.output
    assert json.loads(res.stdout)["control_step"] == \
        "blocking MPI_Allreduce (HPCBSP_CONTROL_COLLECTIVE), through mpi4py (HPCBSP_COMPILED_SYNC=0), " \
        "lateness watch off (HPCBSP_LATENESS)"


@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_rank_silent_inside_the_data_exchange_is_named_within_the_timeout(nprocs):
    """The control step agreed and the last rank then stops inside the exchange (60 s): with a
    2 s sync timeout the others must not wait in MPI for it, but name it (and its host) and end
    the job long before it would wake up.  Oracle: the clock and the error text."""
    t0 = time.monotonic()
    res = run_mpi(nprocs, [os.path.join(PROGRAMS, "stopped_in_exchange.py")], timeout=60)
    elapsed = time.monotonic() - t0
    assert not res.timed_out and elapsed < 30, f"took {elapsed:.1f} s:\n{res.output}"
    assert res.returncode != 0
    late, host = nprocs - 1, socket.gethostname()
    assert (f"the data exchange of superstep 1 timed out after 2 s waiting for rank {late} (on {host})"
            in res.stderr), res.output


# -- the failure detector (hpcbsp/runtime/failure/nodewatch.py), with no sync timeout set --------------------
def test_a_frozen_rank_ends_the_job_with_no_setting():
    # Rank 2 stops itself (SIGSTOP); nobody set a timeout.  The watch's default (10 s stopped)
    # must end the job, naming the rank and the node, within 30 s of the freeze.
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "freeze_one_rank.py"), "stop"], timeout=90,
                  env={"HPCBSP_SYNC_TIMEOUT": ""})
    elapsed = time.monotonic() - t0
    assert not res.timed_out and res.returncode != 0, res.output
    assert elapsed < 30 + 10, f"{elapsed:.0f} s\n{res.output}"  # (start-up and 5 supersteps: a few s)
    lines = [ln for ln in res.stderr.splitlines() if "has been stopped" in ln]
    assert len(lines) == 1 and lines[0].startswith("[hpcbsp] rank 2/3 (pid "), res.output
    assert f"on {socket.gethostname()}) has been stopped for 1" in lines[0], lines  # 10-11 s
    assert "died without a report" not in res.output  # the watch's own kills are no news


def test_a_rank_that_computes_long_is_never_suspected():
    # A detector that ran in the ranks' waits, or needed the GIL, would give rank 0 up here: it
    # computes 4 s, 8 heartbeat timeouts of 0.5 s, in pure Python and in BLAS, in one superstep.
    res = run_mpi(2, [os.path.join(PROGRAMS, "freeze_one_rank.py"), "compute", "4"], timeout=120,
                  env={"HPCBSP_HEARTBEAT_PERIOD": "0.1", "HPCBSP_HEARTBEAT_TIMEOUT": "0.5"})
    assert res.returncode == 0 and "done" in res.stdout, res.output
    assert "[hpcbsp]" not in res.stderr, res.stderr


def test_the_heartbeat_settings_are_checked():
    res = run_mpi(2, [os.path.join(PROGRAMS, "freeze_one_rank.py"), "compute", "0"], timeout=60,
                  env={"HPCBSP_HEARTBEAT_PERIOD": "2", "HPCBSP_HEARTBEAT_TIMEOUT": "3"})
    assert res.returncode != 0 and "shorter than two heartbeat periods" in res.stderr, res.output
    res = run_mpi(2, [os.path.join(PROGRAMS, "freeze_one_rank.py"), "compute", "0"], timeout=60,
                  env={"HPCBSP_HEARTBEAT_TIMEOUT": "soon"})
    assert res.returncode != 0 and "HPCBSP_HEARTBEAT_TIMEOUT='soon'" in res.stderr, res.output
    assert "Traceback" not in res.stderr


def test_sigusr1_prints_every_ranks_stack_with_its_rank_and_the_job_goes_on():
    import re
    import signal
    import subprocess

    from mpi_helpers import clean_env, mpiexec_command

    proc = subprocess.Popen([*mpiexec_command(3), sys.executable, os.path.join(PROGRAMS, "dump_stacks.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(MPIEXEC_TIMEOUT="60"), stdin=subprocess.DEVNULL)
    try:
        pids = [int(proc.stdout.readline().split()[1]) for _ in range(3)]
        time.sleep(1.5)  # rank 0 sleeps in its own work, ranks 1 and 2 wait in the sync
        for pid in pids:
            os.kill(pid, signal.SIGUSR1)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out.count("done") == 3, err  # the ranks went on
    def dump(rank):  # one rank's lines (each is one write; the ranks' lines may interleave)
        return "\n".join(ln for ln in err.splitlines() if ln.startswith(f"[rank {rank}] "))

    for rank in (1, 2):  # where a hung rank is: in the sync, in the program's line 14 (the sync
        # has a Python frame unless it is the compiled one, with spinning waits: optional here)
        assert re.search(rf"(\[rank {rank}\]   File \".*supersteps.py\", line \d+ in sync\n)?"
                         rf"\[rank {rank}\]   File \".*dump_stacks.py\", line 14 in prog", dump(rank)), err
    assert re.search(r"\[rank 0\]   File \".*dump_stacks.py\", line 13 in prog", dump(0)), err


def _unmapped_mpich_segments() -> set[str]:
    """MPICH's /dev/shm segments that no live process maps (another job's live ones are mapped)."""
    files = {f"/dev/shm/{n}" for n in os.listdir("/dev/shm") if n.startswith("mpich_shm_")}
    mapped: set[str] = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            mapped |= _maps(name)
    return files - mapped


def _maps(pid: str) -> set[str]:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return {ln[ln.index("/dev/shm/"):].rstrip("\n") for ln in fh if "/dev/shm/" in ln}
    except OSError:
        return set()


@pytest.mark.alone  # every unmapped segment in /dev/shm counts: no other job may run beside it
@pytest.mark.parametrize("how", ["kill", "segv"])
def test_a_job_ended_by_a_fault_leaves_no_shared_memory_behind(how):
    # MPICH leaves its segment in /dev/shm (tens of MiB) when its ranks are killed; the node's
    # watcher removes the job's own, and only those, once the job's last rank there has ended.
    before = _unmapped_mpich_segments()
    res = run_mpi(3, [os.path.join(PROGRAMS, "crash_one_rank.py"), how], timeout=60)
    assert not res.timed_out and res.returncode != 0
    deadline = time.monotonic() + 10
    while (left := _unmapped_mpich_segments() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left behind: {left}"


def test_sigterm_ends_a_rank_blocked_in_mpi_at_once_and_is_no_silent_death():
    # scancel and time limits send SIGTERM: a rank waiting in a sync (the main thread inside MPI)
    # must still end at once, by that signal, and the watch must not call it a silent death.
    import signal
    import subprocess

    from mpi_helpers import FLAVOUR, clean_env, mpiexec_command

    proc = subprocess.Popen([*mpiexec_command(3), sys.executable, os.path.join(PROGRAMS, "dump_stacks.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(MPIEXEC_TIMEOUT="60"), stdin=subprocess.DEVNULL)
    try:
        pids = [int(proc.stdout.readline().split()[1]) for _ in range(3)]
        time.sleep(1.0)  # rank 0 sleeps in its own work, ranks 1 and 2 wait in the sync
        t0 = time.monotonic()
        for pid in pids:  # as scancel does: two of them are inside MPI
            os.kill(pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode != 0 and elapsed < 10, (elapsed, err)
    # mpiexec says the job ended by that signal, in its own words (crash_line knows each MPI's)
    crash = crash_line(FLAVOUR, out + err)
    assert crash is not None and re.search(r"\b15\b", crash), out + err
    assert "died without a report" not in out + err
