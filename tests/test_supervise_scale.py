"""``hpcbsp supervise`` at scale: bounded probes with a verdict each, node states from Slurm, the
hosts given to the launcher as a file, and a launcher that waits for a lost node ended.

Oracles: fake ``ssh``, ``sinfo``, ``scontrol`` and ``mpiexec`` scripts on PATH (or named as the
launcher) that record what they were run with and when; the bound, the verdicts, the argv and
the host file's lines are checked against those records.  Nothing here needs a cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pytest

from hpcbsp.cli.supervise import hosts as hostcheck
from hpcbsp.cli.supervise import job
from hpcbsp.cli.supervise.command import Supervisor
from hpcbsp.cli.supervise.options import Where
from hpcbsp.cli.supervise.probes import ANSWERED, DOWN, NO_FORK, REFUSED, TIMED_OUT, UP, probe
from hpcbsp.util.jobcommand import read_hosts

PYTHON = sys.executable


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


#: A fake ssh (``ssh -o .. -o .. HOST true``): records its start and end (with how many probes
#: ran at its start, itself included), then answers as HOST's name says: refuse* exits 255,
#: hang* sleeps, any other host answers after a moment.
FAKE_SSH = f"""#!{PYTHON} -S
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
host = sys.argv[-2]
running = os.path.join(here, "running")
os.makedirs(running, exist_ok=True)
mine = os.path.join(running, str(os.getpid()))
open(mine, "w").close()
with open(os.path.join(here, "ssh.log"), "a") as fh:
    fh.write(f"{{host}} {{len(os.listdir(running))}}\\n")
try:
    if host.startswith("refuse"):
        sys.exit(255)
    time.sleep(60 if host.startswith("hang") else 0.3)
finally:
    os.unlink(mine)
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "ssh", FAKE_SSH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def _ssh_log(bin_dir: Path) -> list[tuple[str, int]]:
    log = bin_dir / "ssh.log"
    if not log.exists():
        return []
    return [(h, int(n)) for h, n in (line.split() for line in log.read_text().splitlines())]


def _hostfile(tmp_path: Path, hosts: list[str]) -> str:
    path = tmp_path / "hosts"
    path.write_text("".join(f"{h}\n" for h in hosts))
    return str(path)


# -- the probes ------------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_two_hundred_hosts_are_probed_at_most_sixteen_at_a_time(tmp_path, fake_ssh):
    hosts = [f"node{i}" for i in range(200)]
    t0 = time.monotonic()
    found, note = hostcheck.check_hosts(_hostfile(tmp_path, hosts), hosts, env={}, timeout=30, in_flight=16)
    took = time.monotonic() - t0
    assert note is None and all(found[h].verdict == ANSWERED for h in hosts), found
    log = _ssh_log(fake_ssh)
    assert sorted(h for h, _ in log) == sorted(hosts)  # each host once
    most = max(n for _, n in log)
    assert most <= 16, most
    assert most >= 8, most  # they did run side by side (each takes 0.3 s)
    assert took < 60, took


def test_each_host_gets_its_verdict(tmp_path, fake_ssh):
    hosts = ["good", "refuse1", "hang1", "localhost"]
    found, note = hostcheck.check_hosts(_hostfile(tmp_path, hosts), hosts, env={}, timeout=1.5)
    assert {h: p.verdict for h, p in found.items()} == {
        "good": ANSWERED, "refuse1": REFUSED, "hang1": TIMED_OUT, "localhost": ANSWERED}
    assert found["refuse1"].detail == "exit 255" and not found["hang1"].answers and note is None
    assert "localhost" not in {h for h, _ in _ssh_log(fake_ssh)}  # this machine is not probed


def test_a_probe_that_cannot_be_started_is_not_an_answer(tmp_path, monkeypatch):
    not_executable = tmp_path / "ssh-not-executable"
    not_executable.write_text("#!/bin/sh\nexit 0\n")
    found = probe({"a": [str(tmp_path / "no-such-program")], "b": [str(not_executable)], "c": ["true"]}, timeout=5)
    assert [found[h].verdict for h in "abc"] == [NO_FORK, NO_FORK, ANSWERED]
    assert not found["a"].answers and not found["b"].answers and "No such file" in found["a"].detail
    # no ssh at all: every host that is not this machine counts as not answering, and one line says why
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    found, note = hostcheck.check_hosts(_hostfile(tmp_path, ["x1", "x2"]), ["x1", "x2"], env={})
    assert [p.verdict for p in found.values()] == [NO_FORK, NO_FORK]
    assert note == "could not start the check of 2 hosts (ssh: No such file or directory): counted as not answering"


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError, match="in_flight must be at least 1"):
        probe({"a": ["true"]}, timeout=1, in_flight=0)


# -- node states from Slurm ------------------------------------------------------------------

def _fake_slurm(bin_dir: Path, sinfo: str | None, scontrol: str | None) -> None:
    """sinfo/scontrol that record their arguments and print the text given (None: fail)."""
    for name, text in (("sinfo", sinfo), ("scontrol", scontrol)):
        body = f"cat <<'EOF'\n{text}EOF\n" if text is not None else "echo 'slurm_load_node: Unable to contact' >&2\nexit 1\n"
        _script(bin_dir / name, f"#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/{name}.args\"\n{body}")


@pytest.mark.parametrize("sinfo, scontrol", [
    ("n1 idle\nn2 down*\nn3 mixed\nn4 allocated+\nn3 idle\n", None),
    (None, "NodeName=n1 Arch=x86_64 State=IDLE ThreadsPerCore=1\nNodeName=n2 State=IDLE+DRAIN\n"
           "NodeName=n3 State=MIXED+COMPLETING\nNodeName=n4 State=ALLOCATED\n"),
])
def test_under_slurm_node_states_come_from_slurm_not_probes(tmp_path, fake_ssh, sinfo, scontrol):
    _fake_slurm(fake_ssh, sinfo, scontrol)
    hosts = ["n1", "n2", "n3", "n4", "elsewhere"]
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-4]"}
    found, note = hostcheck.check_hosts(_hostfile(tmp_path, hosts), hosts, env=env)
    assert {h: p.verdict for h, p in found.items()} == {
        "n1": UP, "n2": DOWN, "n3": UP, "n4": UP, "elsewhere": ANSWERED}, found
    assert note is None
    assert [h for h, _ in _ssh_log(fake_ssh)] == ["elsewhere"]  # only the host Slurm does not know
    assert (fake_ssh / "sinfo.args").read_text() == "-h -N -n n[1-4] -o %N %T\n"
    if sinfo is None:
        assert (fake_ssh / "scontrol.args").read_text() == "-o show node n[1-4]\n"


def test_where_slurm_does_not_answer_the_hosts_are_probed(tmp_path, fake_ssh):
    _fake_slurm(fake_ssh, None, None)
    found, note = hostcheck.check_hosts(_hostfile(tmp_path, ["n1"]), ["n1"], env={"SLURM_JOB_ID": "42"})
    assert found["n1"].verdict == ANSWERED and _ssh_log(fake_ssh) == [("n1", 1)]
    assert note is not None and note.startswith("cannot ask Slurm for the nodes' states (sinfo failed: ")
    states, note = hostcheck.node_states(["n1", "n2"], env={"SLURM_JOB_ID": "42"})  # --launch srun
    assert states == {"n1": True, "n2": True} and note is not None and note.endswith(": using every node")


@pytest.mark.parametrize("state, up", [("IDLE", True), ("MIXED+COMPLETING", True), ("ALLOCATED", True),
                                       ("IDLE+DRAIN", False), ("DOWN+NOT_RESPONDING", False),
                                       ("IDLE+POWERED_DOWN", False), ("DOWN", False), ("", False)])
def test_scontrol_states(state, up):
    assert hostcheck.is_up_words(state) is up


# -- the launch: a host file, and an end when the detector has ended the job ----------------------

#: A fake mpiexec (``mpiexec ARGS... PROGRAM``): records its argv, the host file it was given
#: (its lines and mode) and its launch; launch 0 of a job whose program is ``hang`` prints the
#: failure detector's line and waits (with a child in its process group, as hydra's ssh to the
#: lost node) until it is ended; any other launch exits 0.
FAKE_MPIEXEC = f"""#!{PYTHON}
import json, os, signal, subprocess, sys, time
here = os.path.dirname(os.path.abspath(__file__))
argv = sys.argv[1:]
record = {{"argv": argv, "launch": os.environ.get("HPCBSP_SUPERVISE_RESTART")}}
for flag in ("-f", "--hostfile"):
    if flag in argv:
        path = argv[argv.index(flag) + 1]
        record["file"] = path
        record["lines"] = open(path).read().splitlines()
        record["folder_mode"] = oct(os.stat(os.path.dirname(path)).st_mode & 0o777)
with open(os.path.join(here, "mpiexec.log"), "a") as fh:
    fh.write(json.dumps(record) + "\\n")
if argv[-1] == "hang" and record["launch"] == "0":
    child = subprocess.Popen(["sleep", "60"])
    open(os.path.join(here, "child"), "w").write(str(child.pid))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a launcher that waits on, whatever SIGINT says)
    print("[hpcbsp] node n2 (rank 1) has not been heard from for 10 s: it died, froze or lost its link; "
          "ending the job (HPCBSP_HEARTBEAT_TIMEOUT=10)", file=sys.stderr, flush=True)
    time.sleep(60)
sys.exit(0)
"""


def _fake_mpiexec(tmp_path: Path) -> Path:
    mpi_dir = tmp_path / "mpi"
    mpi_dir.mkdir()
    (mpi_dir / "mpichversion").write_text("")  # (says MPICH to util.mpiflavour)
    return _script(mpi_dir / "mpiexec", FAKE_MPIEXEC)


def _runs(mpiexec: Path) -> list[dict]:
    return [json.loads(line) for line in (mpiexec.parent / "mpiexec.log").read_text().splitlines()]


def _supervisor(where: Where, program: list[str], ranks: int, max_restarts: int) -> Supervisor:
    args = argparse.Namespace(program=program, max_restarts=max_restarts, ranks=ranks)
    return Supervisor(args, where, job.Stop())


@pytest.mark.timeout(120)
def test_the_hosts_go_to_mpiexec_as_a_private_file_removed_after(tmp_path, fake_ssh, capfd):
    mpiexec = _fake_mpiexec(tmp_path)
    hosts = [f"host{i}" for i in range(300)] + ["refuse-me"]
    hostfile = _hostfile(tmp_path, hosts)
    where = Where(str(mpiexec), hostfile, read_hosts(hostfile))
    code = _supervisor(where, ["prog", "--x"], len(hosts), 0).run()
    err = capfd.readouterr().err
    assert code == 0, err
    (run,) = _runs(mpiexec)
    argv = run["argv"]
    assert argv[:1] == ["-f"] and argv[2:] == ["-ppn", "1", "-n", "300", "prog", "--x"], argv
    assert run["lines"] == [f"host{i}:1" for i in range(300)]  # the hosts that answered, in order
    assert run["folder_mode"] == "0o700" and not Path(run["file"]).exists()
    assert max(len(a) for a in argv) < 4096 and "-hosts" not in argv
    assert "left out: refuse-me (does not answer: refused, exit 255)" in err, err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("restarts, code", [(1, 0), (0, 128 + 15)])
def test_a_launcher_still_waiting_after_the_detectors_line_is_ended(tmp_path, restarts, code, capfd, monkeypatch):
    monkeypatch.setattr(job, "LOSS_GRACE", 30.0)  # (not what ends it here)
    mpiexec = _fake_mpiexec(tmp_path)
    t0 = time.monotonic()
    got = _supervisor(Where(str(mpiexec)), ["hang"], 2, restarts).run()
    took = time.monotonic() - t0
    err = capfd.readouterr().err
    assert got == code, err
    assert took < job.DETECTOR_GRACE + 6, (took, err)
    assert "the failure detector ended the job and its launcher still ran 2 s later" in err, err
    assert "lost node n2 (said by the failure detector)" in err, err
    assert [r["launch"] for r in _runs(mpiexec)] == (["0", "1"] if restarts else ["0"])
    child = int((mpiexec.parent / "child").read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and "Z" not in Path(f"/proc/{child}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the launcher's child (its ssh to the lost node) still runs"
        time.sleep(0.05)
