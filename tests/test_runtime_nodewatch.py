"""The node's death watch (hpcbsp/runtime/failure/nodewatch.py, its failure detector in detector.py)
without MPI: stand-in ranks
(tests/programs/watched_rank.py), children of this test as a job's ranks are children of the
launcher, register with one watcher; the test kills them in an order of its choosing.

Oracles: the order and the signals the test itself used; wait statuses built by hand
(``os.waitstatus_to_exitcode`` semantics: a signal in the low 7 bits, an exit code above them);
the file system before and after.
"""
from __future__ import annotations

import mmap
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_util_procstat import KEEPS_REAPED_STATUS

from hpcbsp.runtime.failure import detector, nodeclean, nodewatch
from hpcbsp.runtime.failure.deaths import verdict
from hpcbsp.runtime.failure.registry import Rank

HERE = Path(__file__).parent
RANK = str(HERE / "programs" / "watched_rank.py")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the watch needs Linux")


# -- what is said about the first death ----------------------------------------------------------
@pytest.mark.parametrize("code, all_here, kind, words", [
    (signal.SIGKILL, True, "sure", "killed by SIGKILL"),
    (signal.SIGKILL, False, "maybe", "killed by SIGKILL"),
    (signal.SIGSEGV, False, "sure", "crashed with SIGSEGV"),  # launchers kill, they do not crash
    (signal.SIGBUS | 0x80, True, "sure", "crashed with SIGBUS"),  # 0x80: a core was dumped
    (signal.SIGTERM, True, "quiet", ""),  # scancel, a time limit
    (signal.SIGINT, False, "quiet", ""),
    (signal.SIGHUP, True, "quiet", ""),
    (3 << 8, True, "quiet", ""),  # exit(3): it ended by itself, no silent death
    (None, True, "sure", "killed by a signal or crashed"),  # already reaped: the cause is unknown
    (None, False, "maybe", "killed by a signal or crashed"),
])
def test_verdict(code, all_here, kind, words):
    got, how = verdict(code, all_here)
    assert got == kind and (words in how if words else how == "")


# -- stand-in ranks -------------------------------------------------------------------------------
class Job:
    """Stand-in ranks of one job on this node; the watcher's stderr is the first rank's."""

    def __init__(self, ranks, size, shm=None):
        self.procs = []
        for r in ranks:
            args = [sys.executable, RANK, str(r), str(size)] + ([shm] if shm else [])
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
            self.procs.append(proc)
        self.watcher = _watcher_of(os.getpid())

    def kill(self, i, sig=signal.SIGKILL):
        os.kill(self.procs[i].pid, sig)

    def tell(self, i, line):
        self.procs[i].stdin.write(line + "\n")
        self.procs[i].stdin.flush()

    def lines(self, timeout=20.0):
        """Every rank's stderr lines, once the watcher has ended (the ranks are reaped only now)."""
        _wait_gone(self.watcher, timeout)
        out = []
        for proc in self.procs:
            proc.wait(timeout=timeout)
            out += proc.stderr.read().splitlines()
            proc.stdin.close(), proc.stdout.close(), proc.stderr.close()
        return [ln for ln in out if ln.startswith("[hpcbsp]")]


def _watcher_of(parent: int) -> int:
    """The pid of the watcher of the job whose launcher is ``parent`` (found by its marker)."""
    key = f"-{parent}-{_start_time(parent)}"
    for _ in range(200):
        found = []
        for name in os.listdir("/proc"):
            try:
                cmd = open(f"/proc/{name}/cmdline", "rb").read().split(b"\0")
                if any(c.endswith(b"nodewatch.py") for c in cmd) and any(c.endswith(key.encode()) for c in cmd):
                    found.append((int(_start_time(name)), int(name)))
            except (OSError, IndexError):
                continue  # (gone meanwhile)
        if found:
            return max(found)[1]  # the newest: one of an earlier Job may still be ending
        time.sleep(0.01)
    raise AssertionError("no watcher started")


def _start_time(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]


def _wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(f"/proc/{pid}"), "the watcher did not end after the job"


def _marker():
    import tempfile
    parent = os.getpid()
    return os.path.join(tempfile.gettempdir(),
                        f"hpcbsp-failed-{os.getuid()}-{socket.gethostname()}-{parent}-{_start_time(parent)}")


def test_the_first_to_die_is_named_even_when_the_watcher_runs_last():
    # The watcher is stopped while rank 1 dies and, 0.2 s later, ranks 0 and 2 (as a launcher
    # kills the rest): when it runs again every pipe is closed; only the kernel's order of the
    # closes can tell it which went first.  Every rank is here: it names rank 1 plainly.
    job = Job([0, 1, 2], 3)
    os.kill(job.watcher, signal.SIGSTOP)
    try:
        job.kill(1)
        time.sleep(0.2)
        job.kill(2)
        job.kill(0)
        time.sleep(0.2)
    finally:
        os.kill(job.watcher, signal.SIGCONT)
    lines = job.lines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"[hpcbsp] rank 1/3 (pid {job.procs[1].pid} on "), lines
    assert lines[0].endswith("died without a report: killed by SIGKILL (out of memory, or a kill from outside)")
    assert not os.path.exists(_marker())  # removed when the node's last rank ended


def test_a_normal_end_is_silent():
    job = Job([0, 1], 2)
    for i in range(2):
        job.tell(i, "exit")
    assert job.lines() == []
    assert all(p.returncode == 0 for p in job.procs)


def test_the_signals_meant_for_the_ranks_leave_the_watcher_running():
    # Slurm signals every process of a step (scancel --signal, a time-limit warning, SIGTERM to a
    # step that srun ends because a task was killed); a hung job's ranks are sent SIGUSR1 for
    # their stacks: the watcher stays, then still sees a death.
    job = Job([0, 1], 2)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        os.kill(job.watcher, sig)
    time.sleep(0.3)
    with open(f"/proc/{job.watcher}/stat") as fh:
        assert fh.read().rsplit(")", 1)[1].split()[0] in ("S", "R")
    job.kill(1)
    job.tell(0, "exit")
    lines = job.lines()
    assert len(lines) == 1 and lines[0].startswith(f"[hpcbsp] rank 1/2 (pid {job.procs[1].pid} on "), lines


def test_a_rank_that_reported_its_failure_keeps_the_watch_quiet():
    # It said why the job ends (claimed) and died; the launcher's kills that follow are no news.
    job = Job([0, 1, 2], 3)
    job.tell(2, "claim")
    time.sleep(0.2)
    job.kill(0)
    job.kill(1)
    assert job.lines() == []


def test_a_job_being_stopped_is_not_a_silent_death():
    job = Job([0, 1], 2)
    job.kill(0, signal.SIGTERM)
    job.kill(1, signal.SIGTERM)
    assert job.lines() == []


def test_the_watcher_is_out_of_the_ranks_process_tree():
    # A launcher that kills its job's process tree (srun -K under Slurm's proctrack/linuxproc)
    # must not take the watcher with a dying rank, whose children stay its own until its last
    # thread has exited.  Oracle: /proc (the watcher's parent; the ranks' children, none left as a
    # zombie by the process that forked the watcher).
    from hpcbsp.util.procstat import descendants, ppid, processes
    job = Job([0, 1], 2)
    try:
        ranks = {p.pid for p in job.procs}
        assert ppid(job.watcher) not in ranks | {os.getpid()}
        assert not any(job.watcher in descendants(pid) for pid in ranks | {os.getpid()})
        assert [pid for pid, f in processes().items() if int(f[1]) in ranks] == []
    finally:
        for i in range(2):
            job.tell(i, "exit")
        assert job.lines() == []


def test_across_nodes_the_doubt_is_said_only_when_it_exists():
    # Two of the job's four ranks are here: another node's rank may have died first.
    job = Job([0, 1], 4)
    job.kill(0)
    job.kill(1)
    lines = job.lines()
    assert len(lines) == 1 and "a rank on another node may have died first" in lines[0], lines
    # ... unless another rank of the node is still running: then this one was first.
    job = Job([2, 3], 4)
    job.kill(1)
    time.sleep(1.0)
    job.tell(0, "exit")
    lines = job.lines()
    assert len(lines) == 1 and lines[0].startswith(f"[hpcbsp] rank 3/4 (pid {job.procs[1].pid} "), lines
    assert "may have" not in lines[0]


def test_a_crash_is_named_with_its_signal():
    job = Job([0, 1], 2)
    job.kill(0, signal.SIGSEGV)
    time.sleep(0.2)
    job.kill(1)
    lines = job.lines()
    assert len(lines) == 1 and lines[0].startswith("[hpcbsp] rank 0/2 ") and "crashed with SIGSEGV" in lines[0]


@pytest.mark.alone  # an unmapped segment it keeps on purpose: another test's clean-up would take it
def test_the_segments_of_a_killed_job_are_removed_and_those_of_a_normal_end_kept(tmp_path):
    shm = f"/dev/shm/mpich_shm_hpcbsp_test_{os.getpid()}"
    try:
        job = Job([0, 1], 2, shm=shm)
        job.kill(0)
        job.kill(1)
        job.lines()
        assert not os.path.exists(shm)  # the job's own segment, mapped by its ranks: removed
        job = Job([0, 1], 2, shm=shm)
        job.tell(0, "exit")
        job.tell(1, "exit")
        job.lines()
        assert os.path.exists(shm)  # a normal end: what MPI leaves is MPI's business
    finally:
        if os.path.exists(shm):
            os.unlink(shm)


@pytest.mark.alone  # likewise: its fresh unmapped segment must survive until it looks
def test_leftovers_of_dead_jobs_are_removed_and_nothing_else(tmp_path):
    now = time.time()
    me = os.getpid()
    marker = tmp_path / f"hpcbsp-failed-{os.getuid()}-host-x-{me}-{_start_time(me)}"
    dead = tmp_path / f"hpcbsp-failed-{os.getuid()}-host-x-{2 ** 22 + 7}-123"  # no such process
    live = tmp_path / f"hpcbsp-failed-{os.getuid()}-host-x-1-{_start_time(1)}"  # init runs
    old_start = tmp_path / f"hpcbsp-failed-{os.getuid()}-host-x-1-999999999"  # pid 1, another start
    other_host = tmp_path / f"hpcbsp-failed-{os.getuid()}-elsewhere-{2 ** 22 + 7}-123"
    for d in (dead, live, old_start, other_host):
        d.mkdir()
    tag = f"hpcbsp_test_{me}"
    old, fresh, mapped = (f"/dev/shm/mpich_shm_{tag}_{k}" for k in ("old", "fresh", "mapped"))
    try:
        for path in (old, fresh, mapped):
            with open(path, "wb") as fh:
                fh.write(b"\0" * 4096)
        for path in (old, mapped):
            os.utime(path, (now - 2 * nodeclean.STALE_AGE, now - 2 * nodeclean.STALE_AGE))
        with open(mapped, "r+b") as fh:
            view = mmap.mmap(fh.fileno(), 4096)  # a live job maps it
            nodeclean.remove_stale(str(marker), now=now)
            view.close()
        assert not dead.exists() and not old_start.exists()
        assert live.exists() and other_host.exists()
        assert not os.path.exists(old)
        assert os.path.exists(fresh) and os.path.exists(mapped)
    finally:
        for path in (old, fresh, mapped):
            if os.path.exists(path):
                os.unlink(path)


# -- the failure detector between nodes' watchers, driven by hand -----------------------------------
KEY = "ab" * 32


def _job(tmp_path, hosts=("a", "b"), timeout=0.5):
    """One watcher per host on loopback, introduced to each other with one table and secret."""
    said = {h: [] for h in hosts}
    watches = {}
    for host in hosts:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        watches[host] = nodewatch.Watch(listener, str(tmp_path / f"marker-{host}"), period=0.1,
                                        timeout=timeout, say=said[host].append, host=host)
        assert watches[host].detector.address == "127.0.0.1"  # (this machine's name: loopback here)
    table = f"peers\nkey {KEY}\n" + "".join(
        f"{h} 127.0.0.1 {w.detector.port} {i}\n" for i, (h, w) in enumerate(watches.items()))
    for w in watches.values():
        w.detector.meet(table.encode())
        assert w.detector.member is not None
    return watches, said, time.monotonic()


def _period(watches, now, beating=None):
    """One period at ``now``: the beating watches tick; then every watch takes in what arrived
    (loopback datagrams are there at once)."""
    for host in beating or watches:
        watches[host].beat(now)
    time.sleep(0.05)
    for w in watches.values():
        w.detector.hear(now)
        if not w.failed and (ends := w.detector.ending()) is not None:
            w.fail(*ends)


def test_a_silent_node_is_given_up_after_the_timeout_and_not_before(tmp_path):
    watches, said, t = _job(tmp_path)
    for step in range(8):  # both beat: nobody is suspected, however long it lasts
        t += 0.25
        _period(watches, t)
    assert said == {"a": [], "b": []}
    for _ in range(2):  # b falls silent (frozen, or its link is cut): last heard 0.5 s ago, not more
        t += 0.25
        _period(watches, t, beating=("a",))
    assert said["a"] == []
    t += 0.25  # now 0.75 s: a gives b up, and tells b (which hears it: its link is back)
    _period(watches, t, beating=("a",))
    assert len(said["a"]) == 1 and said["a"][0].startswith("[hpcbsp] node b (rank 1) has not been heard from"), said
    assert watches["a"].failed and said["b"] == [] and watches["b"].failed  # b ends too, silently


def test_a_node_that_said_goodbye_is_not_expected_any_more(tmp_path):
    watches, said, t = _job(tmp_path)
    watches["b"].detector.leave()  # b's ranks all ended normally
    time.sleep(0.05)
    watches["a"].detector.hear(t)
    watches["a"].beat(t + 100)
    assert said["a"] == [] and not watches["a"].failed


def test_one_node_speaks_for_a_lost_one_and_every_other_ends_its_ranks(tmp_path):
    # Nodes a, b, c, d; c falls silent.  Its nearest observer, b, says it; a and d end their
    # ranks without a word.  Oracle: the lines said, and a stand-in rank on d killed.
    watches, said, t = _job(tmp_path, hosts=("a", "b", "c", "d"))
    child = subprocess.Popen(["sleep", "30"])
    try:
        watches["d"].ranks[-1] = Rank(3, 4, child.pid, -1)  # a rank without a pipe
        for _ in range(3):
            t += 0.2
            _period(watches, t)
        for _ in range(4):
            t += 0.2
            _period(watches, t, beating=("a", "b", "d"))
        assert len(said["b"]) == 1 and said["b"][0].startswith("[hpcbsp] node c (rank 2) has not been heard from"), said
        assert said["a"] == said["d"] == [] and watches["a"].failed and watches["d"].failed
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()


def test_forged_datagrams_neither_end_the_job_nor_keep_a_silent_node(tmp_path):
    # Someone outside the job sends the old protocol's words and datagrams under a wrong key to a's
    # socket: they are counted as forged; b, silent, is still given up.
    from hpcbsp.runtime.failure.protocol import VERDICT, seal
    watches, said, t = _job(tmp_path)
    a = watches["a"].detector
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
        for data in (b"hb b", b"died b 0.0 1", b"bye b", seal(b"x" * 32, VERDICT, 1, 5, bytes(17))):
            out.sendto(data, ("127.0.0.1", a.port))
        time.sleep(0.05)
        _period(watches, t + 0.1, beating=("a",))
        assert a.counts()["forged"] == 4 and not watches["a"].failed
        for step in range(2, 8):
            out.sendto(b"hb b", ("127.0.0.1", a.port))
            _period(watches, t + 0.1 * step, beating=("a",))
    assert len(said["a"]) == 1 and "node b (rank 1) has not been heard from" in said["a"][0]


@pytest.mark.parametrize("abnormal", [True, False])
def test_after_an_abnormal_end_a_watcher_relays_the_deaths_other_nodes_announce(tmp_path, abnormal):
    # Nodes a, b, c, d.  The ranks of a and b have ended (under Open MPI they exit at once when a
    # peer dies); then d announces its rank's death.  Announcements are flooded +1, +2 places on:
    # d's reaches c only through a or b.  After an abnormal end they linger and relay it, and c
    # learns that d's death came first; after a normal end they do not.  Oracle: c's record of
    # the deaths announced, against the time and rank d announced.
    import threading
    watches, _, _ = _job(tmp_path, hosts=("a", "b", "c", "d"))
    for host in ("a", "b"):
        watches[host].abnormal = abnormal
    lingering = [threading.Thread(target=watches[h].linger) for h in ("a", "b")]
    started = time.monotonic()
    for th in lingering:
        th.start()
    seen = time.time()
    watches["d"].detector.announce(seen, 3)
    time.sleep(0.05)
    watches["c"].detector.hear()
    for th in lingering:
        th.join(timeout=10)
    earlier, _ = watches["c"].detector.deaths_elsewhere(seen + 1.0)
    assert earlier is abnormal
    assert watches["c"].detector.member.deaths == ({3: (seen, 3)} if abnormal else {})
    # The relay lingers one heartbeat period (0.1 s here), not until a verdict that never comes.
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("sig, named", [(signal.SIGTERM, False), (signal.SIGKILL, True)])
def test_a_first_death_reaped_before_the_watch_looks_is_judged_by_the_others(sig, named):
    # The launcher (here the test) reaps rank 0 before the (stopped) watcher reads how it ended.
    # The others ended by the same signal: SIGTERM is a job being stopped (no line); SIGKILL is
    # a launcher ending the job after rank 0 went (rank 0 named; how, where the kernel keeps the
    # status of a reaped process for the watcher's pidfd, else unknown).
    job = Job([0, 1, 2], 3)
    os.kill(job.watcher, signal.SIGSTOP)
    try:
        job.kill(0, sig)
        job.procs[0].wait(timeout=10)
        time.sleep(0.1)
        job.kill(1, sig)
        job.kill(2, sig)
        time.sleep(0.2)
    finally:
        os.kill(job.watcher, signal.SIGCONT)
    lines = job.lines()
    if named:
        how = "killed by SIGKILL (out of memory, or a kill from outside)" if KEEPS_REAPED_STATUS \
            else "killed by a signal or crashed"
        assert len(lines) == 1 and lines[0].startswith("[hpcbsp] rank 0/3 ") and lines[0].endswith(how), lines
    else:
        assert lines == []


@pytest.mark.skipif(not KEEPS_REAPED_STATUS,
                    reason="the kernel (before Linux 6.15) keeps no status of a reaped process: its end is unknown")
def test_ranks_that_their_mpi_library_aborted_are_no_death_once_reaped():
    # Under Open MPI a rank that loses its connection to a peer on another node exits (code 14,
    # no word on its pipe): the launcher reaps it before the (stopped) watcher looks.  Through
    # its pidfd the watcher still reads the plain exit, and leaves the naming to the node whose
    # rank died (a silent rank ended by a signal would be named: the test above).
    job = Job([0, 1], 2)
    os.kill(job.watcher, signal.SIGSTOP)
    try:
        for i in (0, 1):
            job.tell(i, "abort 14")
            assert job.procs[i].wait(timeout=10) == 14
    finally:
        os.kill(job.watcher, signal.SIGCONT)
    assert job.lines() == []


def _die_on_two_nodes(tmp_path, gap):
    """Rank 1 (node b) is killed, rank 0 (node a) ``gap`` seconds later, as a launcher or an MPI
    library ends a job's other ranks for a lost one.  Both watchers deal with their death at the
    same time (threads: neither has heard the other yet), each unsure whether it was first.
    Returns what each said and the pids."""
    import threading
    watches, said, _ = _job(tmp_path)
    children = {h: subprocess.Popen(["sleep", "30"]) for h in ("b", "a")}
    try:
        seen = {}
        for h in ("b", "a"):
            children[h].send_signal(signal.SIGKILL)  # a zombie until reaped below
            seen[h] = time.time()
            time.sleep(gap)
        ranks = {h: Rank(1 if h == "b" else 0, 2, children[h].pid, -1)  # ranks without pipes
                 for h in ("a", "b")}
        threads = [threading.Thread(target=watches[h].first_death, args=(ranks[h], seen[h])) for h in ("a", "b")]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=10)
        return said, {h: c.pid for h, c in children.items()}
    finally:
        for child in children.values():
            child.kill()
            child.wait(timeout=10)


def test_of_two_nodes_deaths_only_the_earlier_is_named(tmp_path):
    # 50 ms apart (more than SAME_MOMENT).  Oracle: the order of the kills, made by the test:
    # b names its rank with the doubt, a stays quiet.
    said, pid = _die_on_two_nodes(tmp_path, 0.05)
    assert said["a"] == [], said
    assert len(said["b"]) == 1 and said["b"][0].startswith(f"[hpcbsp] rank 1/2 (pid {pid['b']} on "), said
    assert said["b"][0].endswith("killed by SIGKILL (out of memory, or a kill from outside) "
                                 "(the launcher was ending the job: a rank on another node may have died first)")


def test_deaths_on_two_nodes_at_one_moment_are_named_together(tmp_path):
    # Within SAME_MOMENT the order cannot be told: one line, by the node that saw its death
    # first (b, killed first by the test), naming a's rank with it.
    assert detector.SAME_MOMENT >= 0.005
    said, pid = _die_on_two_nodes(tmp_path, 0.0)
    assert said["a"] == [], said
    assert len(said["b"]) == 1 and said["b"][0].startswith(f"[hpcbsp] rank 1/2 (pid {pid['b']} on "), said
    assert re.search(r"killed by SIGKILL \(out of memory, or a kill from outside\), within \d+\.\d ms of "
                     r"rank 0/2 \(on a\): either may have died first$", said["b"][0]), said


# -- the watcher runs as a script with the standard library only ----------------------------------
def test_the_watchers_modules_import_the_standard_library_and_each_other_only():
    # python -I -S nodewatch.py: no site-packages, no hpcbsp package; its modules load each other
    # by name from the path the script sets up.  Oracle: Python's own list of its standard modules.
    import ast
    failure = Path(nodewatch.__file__).parent
    files = [failure / "nodewatch.py", failure / "detector.py", failure / "nodeclean.py",
             failure / "protocol.py", failure / "ending.py", failure / "registry.py", failure / "deaths.py",
             failure / "lines.py", failure.parents[1] / "util" / "procstat.py", failure.parents[1] / "util" / "text.py"]
    siblings = {f.stem for f in files}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue  # a relative import: the package's branch (if __package__:), not the script's
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in siblings, f"{path.name} imports {name}"


def test_no_module_of_the_failure_package_is_over_300_lines():
    failure = Path(nodewatch.__file__).parent
    sizes = {p.name: len(p.read_text().splitlines()) for p in failure.glob("*.py")}
    assert len(sizes) >= 9 and all(n <= 300 for n in sizes.values()), sizes
