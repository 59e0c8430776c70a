"""The emulated cluster's links behave like links: shaped to a rate, they move a message at that
rate and drop nothing (slurm/local-cluster.sh ``shape`` and its plain rate limiter).

Oracle: the line rate itself.  1 MiB at 10 Mbit/s takes 8·2^20 / 10^7 = 0.839 s; Ethernet, IP
and TCP headers add about 4.5 %, so a transfer between two nodes must take 0.839 s within 10 %,
and the shaping qdiscs on both ends of both links must count 0 drops (``tc -s qdisc``).  With
the earlier shaping (a 32 KiB bucket and ``latency 50ms``) bursts overflowed the queue and were
dropped; a drop here means TCP retransmission timeouts in every measured exchange.

Needs root and the running cluster of 4 or more nodes (``.ci/run`` starts it); the test reshapes
its links to 10mbit and restores the rate they had.  Without it the tests skip and say why
(under CI they fail instead: cluster_helpers).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_helpers import (
    CLUSTER_FILE,
    LINK_PREFIX,
    cluster_nodes,
    cluster_required,  # noqa: F401  (the fixture behind unavailable_marks)
    cluster_unavailable,
    unavailable_marks,
)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "slurm" / "local-cluster.sh"
NODES = cluster_nodes()
RATE_BITS = 10e6
MIB = 1 << 20

SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 0)); s.listen(1); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); got = 0
while got < int(sys.argv[1]):
    b = c.recv(1 << 16)
    if not b: break
    got += len(b)
c.sendall(b"k"); print(got, flush=True)
"""
CLIENT = r"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
data = b"x" * int(sys.argv[3]); t0 = time.perf_counter()
c.sendall(data); assert c.recv(1) == b"k"; print(time.perf_counter() - t0)
"""


def _unavailable() -> str | None:
    return cluster_unavailable(2, launch=False, root_for="the test enters the emulated nodes' namespaces and reshapes their links")


# alone: it reshapes every node's link, and its oracle is one transfer's time and the links' drops.
pytestmark = [pytest.mark.slurm, pytest.mark.serial_only, pytest.mark.alone, *unavailable_marks(_unavailable())]


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _drops(i: int) -> int:
    """Packets dropped by both shaping qdiscs of node i's link."""
    here = subprocess.run(["tc", "-s", "qdisc", "show", "dev", f"{LINK_PREFIX}{i}"], capture_output=True, text=True)
    there = subprocess.run(["tc", "-n", NODES[i - 1], "-s", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True)
    return sum(int(d) for d in re.findall(r"dropped (\d+)", here.stdout + there.stdout))


def _in_node(node: str, code: str, *args: str) -> list[str]:
    return ["nsenter", f"--net=/var/run/netns/{node}", "--", sys.executable, "-c", code, *args]


@pytest.fixture
def shaped_10mbit():
    before = re.search(r"^rate=(.*)$", CLUSTER_FILE.read_text(), re.M)
    old = before.group(1) if before and before.group(1) else "none"
    out = _script("shape", "--link-rate", "10mbit")
    assert out.returncode == 0, out.stderr
    try:
        yield
    finally:
        back = _script("shape", "--link-rate", old)
        assert back.returncode == 0, back.stderr


def test_one_mib_moves_at_the_line_rate_without_a_drop(shaped_10mbit):
    assert "rate=10mbit" in CLUSTER_FILE.read_text()
    server = subprocess.Popen(_in_node(NODES[1], SERVER, str(MIB)), stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        assert port.isdigit(), port
        client = subprocess.run(_in_node(NODES[0], CLIENT, NODES[1], port, str(MIB)), capture_output=True,
                                text=True, timeout=60)
        assert client.returncode == 0, client.stderr
        seconds = float(client.stdout)
        assert server.wait(timeout=30) == 0 and int(server.stdout.readline()) == MIB
    finally:
        server.kill()
    line_rate = 8 * MIB / RATE_BITS  # 0.839 s
    assert abs(seconds - line_rate) <= 0.10 * line_rate, f"1 MiB took {seconds:.3f} s, the line rate {line_rate:.3f} s"
    assert _drops(1) == 0 and _drops(2) == 0
    status = _script("status")
    assert re.search(rf"link {LINK_PREFIX}1: \d+ bytes sent by the node, \d+ received, 0 packets dropped", status.stdout), \
        status.stdout


@pytest.mark.parametrize("args, message", [
    ((), "shape needs --link-rate RATE (or none)"),
    (("--link-rate", "fast"), "--link-rate needs a rate like 1gbit, 100mbit or 500kbit, or none, not 'fast'"),
    (("--burst", "1"), "unknown option for shape: --burst"),
])
def test_bad_shape_arguments_get_one_line_and_status_2(args, message):
    out = _script("shape", *args)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"local-cluster: {message} (see --help)"], out.stderr
