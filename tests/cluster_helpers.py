"""Shared by the tests that need a running Slurm or the emulated nodes of ``slurm/local-cluster.sh``.

Outside CI such a test skips and says why. Under CI (``CI=true``, which ``.ci/run`` sets after it
started the 4-node cluster) the same reason fails the test instead: CI must not go green without
testing Slurm and the nodes.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mpi_helpers import remove_leftover_segments, shm_segments

#: What ``slurm/local-cluster.sh start --nodes N`` (N >= 2) leaves for its users.
RUN = Path("/run/hpcbsp-slurm")
CLUSTER_FILE = RUN / "cluster"
HOSTFILE = RUN / "hosts"
RSH = RUN / "rsh"
NODE_PREFIX = "hpcbsp-node"
LINK_PREFIX = "hpcbsp-v"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def unavailable_marks(reason: str | None) -> list[pytest.MarkDecorator]:
    """Marks for a module whose tests cannot run for ``reason`` (None: they can): a skip with the
    reason, or under CI a failure of every test with it. The module must import the fixture
    :func:`cluster_required` (pytest finds fixtures in the test module's namespace)."""
    if reason is None:
        return []
    if in_ci():
        return [pytest.mark.usefixtures("cluster_required"), pytest.mark.unavailable(reason)]
    return [pytest.mark.skip(reason=reason)]


def skip_or_fail(reason: str | None) -> None:
    """Inside a test or fixture: skip with ``reason`` (None: nothing), or under CI fail with it."""
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"CI=true, so this test may not skip, but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def cluster_required(request: pytest.FixtureRequest) -> None:
    """Fails the test with the reason its module cannot run (used under CI only)."""
    mark = request.node.get_closest_marker("unavailable")
    pytest.fail(f"CI=true, so this test may not skip, but: {mark.args[0] if mark else 'unknown'}",
                pytrace=False)


def cluster_unavailable(nodes: int = 4, *, root_for: str = "the test enters the emulated nodes' namespaces",
                        launch: bool = True, srun: bool = False, mpiexec: bool = False) -> str | None:
    """Why a cluster test cannot run here (its skip reason), or None.

    ``nodes``: emulated nodes the test needs; ``launch``: the plain-MPI path (the cluster's host
    file and rsh launcher); ``srun``: Slurm's srun; ``mpiexec``: this environment's mpiexec.
    """
    from hpcbsp.runtime.launch import find_mpiexec

    if os.geteuid() != 0:
        return f"needs root: {root_for} (slurm/local-cluster.sh)"
    if len(cluster_nodes()) < nodes:
        return (f"no local cluster of {nodes} or more emulated nodes runs "
                "(as root: slurm/local-cluster.sh start --nodes 4)")
    missing = [what for what, need, there in (
        ("srun", srun, shutil.which("srun") is not None),
        ("this environment's mpiexec", mpiexec, find_mpiexec() is not None),
        (f"the local cluster's hostfile {HOSTFILE}", launch, HOSTFILE.exists()),
        (f"the local cluster's launcher {RSH}", launch, RSH.exists())) if need and not there]
    return f"missing: {', '.join(missing)}" if missing else None


def cluster_nodes() -> list[str]:
    """The emulated nodes of the running local cluster (empty when none runs)."""
    try:
        text = CLUSTER_FILE.read_text()
    except OSError:
        return []
    match = re.search(r"^nodes=(\d+)$", text, re.M)
    return [f"{NODE_PREFIX}{i}" for i in range(1, int(match.group(1)) + 1)] if match else []


def link_bytes() -> dict[str, tuple[int, int]]:
    """Per node: (bytes the node sent, bytes it received) on its link, read from the host side
    of its veth pair (its rx is what the node sent)."""
    out = {}
    for i, node in enumerate(cluster_nodes(), start=1):
        stats = Path("/sys/class/net") / f"{LINK_PREFIX}{i}" / "statistics"
        out[node] = (int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text()))
    return out


# --- Slurm jobs --------------------------------------------------------------------------------

#: Job states after which a job does not run again (a requeued job passes through PENDING).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                "DEADLINE", "PREEMPTED"}


def _slurm_env() -> dict[str, str]:
    from mpi_helpers import clean_env

    return clean_env(slurm=True)


def job_records(job_id: str) -> list[dict[str, str]]:
    """The job's records as ``scontrol show job`` has them, one per array task (finished jobs
    stay for MinJobAge)."""
    proc = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                          timeout=30, env=_slurm_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in proc.stdout.splitlines() if line.strip()]


def wait_final(job_id: str, timeout: float) -> list[dict[str, str]]:
    """Poll until the job (every task of an array) has ended for good; return its records.
    After ``timeout`` seconds the job is cancelled and the test fails.

    Used for the longer jobs instead of ``sbatch --wait``, which polls at 2, 10, 42 s ... after
    submission and so would add up to half a minute to each of them."""
    deadline = time.monotonic() + timeout
    while True:
        records = job_records(job_id)
        running = [rec["JobState"] for rec in records if rec["JobState"] not in FINAL_STATES]
        if not running:
            return records
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=30, env=_slurm_env(), stdin=subprocess.DEVNULL)
            pytest.fail(f"job {job_id} still {', '.join(running)} after {timeout} s; cancelled it")
        time.sleep(0.5)


def tagged_pids(node: str, tag: str) -> list[int]:
    """The processes on ``node`` that belong to the job tagged ``tag`` (its environment)."""
    out = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True, timeout=10).stdout
    pids = []
    for pid in map(int, out.split()):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"HPCBSP_FAULT_TAG={tag}".encode() in env.split(b"\0"):
            pids.append(pid)
    return pids


class TimedLines:
    """A child's output (stdout, with stderr merged into it by the caller), each line with the
    monotonic time it came: a test reads when something was said, not only that it was."""

    def __init__(self, proc: subprocess.Popen[str]):
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def text(self) -> str:
        self._thread.join(timeout=5)
        return "\n".join(line for _, line in self.lines)

    def first(self, needle: str) -> tuple[float, str] | None:
        return next(((t, line) for t, line in self.lines if needle in line), None)


def kill_node(node: str, tag: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process of the job tagged ``tag`` on ``node`` (SIGKILL: what a node
    that dies leaves behind); the test fails if the job has none there.  Returns their pids."""
    victims = tagged_pids(node, tag)
    assert victims, f"no process of the job on {node}"
    for pid in victims:
        os.kill(pid, sig)
    return victims


def assert_none_outlived(tag: str, nodes: list[str], grace: float = 10.0, output: str = "") -> None:
    """No process of the job tagged ``tag`` may be left on ``nodes`` once ``grace`` seconds have
    passed: those left are killed and the test fails naming them (with ``output``'s tail)."""
    deadline = time.monotonic() + grace
    while any((left := {n: tagged_pids(n, tag) for n in nodes}).values()):
        if time.monotonic() > deadline:
            for pids in left.values():
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
            pytest.fail(f"processes of the job outlived it: {left}\n{output[-4000:]}")
        time.sleep(0.2)


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen[str], timeout: float, what: str,
               output: Callable[[], str]) -> None:
    """Poll ``ready()`` until it holds; the test fails saying ``what`` did not happen if ``proc``
    ends first or ``timeout`` seconds pass (with the tail of ``output()``)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what}:\n{output()[-4000:]}")
        time.sleep(0.05)


@contextmanager
def stopped_at_exit(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """However the block ends, ``proc`` does not outlive it: still running, it gets SIGINT (a
    supervisor then stops its job as on Ctrl-C) and, 20 s later, SIGKILL."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def supervise_with_a_lost_node(cmd: list[str], env: dict[str, str], cwd: Path, *, ready: Callable[[], bool],
                                what: str, node: str | None, tag: str, end_within: float,
                                settle: float = 0.0) -> tuple[TimedLines, float | None, int]:
    """Run the supervisor ``cmd`` (its output read as it comes); once ``ready()`` holds (within
    90 s, else the test fails saying ``what`` did not happen) and ``settle`` seconds more, SIGKILL
    every process of the job (``tag``) on ``node`` (``None``: no kill); then wait up to
    ``end_within`` seconds for the supervisor to end.  Returns its output, the time of the kill
    (``None`` without one) and its exit status."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                            stdin=subprocess.DEVNULL)
    lines = TimedLines(proc)
    killed_at = None
    with stopped_at_exit(proc):
        if node is not None:
            wait_until(ready, proc, 90, what, lines.text)
            time.sleep(settle)
            kill_node(node, tag)
            killed_at = time.monotonic()
        try:
            proc.wait(timeout=end_within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the supervisor still ran {end_within} s after {'the kill' if node else 'its start'}:\n"
                        f"{lines.text()[-4000:]}")
    return lines, killed_at, proc.returncode


@pytest.fixture(autouse=True)
def no_leftover_shared_memory() -> Iterator[None]:
    """The MPI's shared-memory files that a test's killed ranks left in /dev/shm are removed
    after each test of a module that imports this fixture (autouse there, as pytest does with
    fixtures a module imports)."""
    before = shm_segments()
    yield
    remove_leftover_segments(before)
