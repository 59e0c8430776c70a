"""``--mode async``: conservative asynchronous stepping with lookahead (Chandy-Misra-Bryant).

No global barrier per interval.  Rank r knows, for each source rank q (a rank with synapses onto
r), the time ``known[q]`` up to which q has simulated and sent its spikes, and the lookahead
``d(q, r)``: the minimum delay of q's synapses onto r.  A spike q has not sent yet fires at
``known[q]`` or later and is due at ``known[q] + d(q, r)`` or later, so r may simulate up to::

    horizon = min(T, now + window cap, min over source ranks q of known[q] + d(q, r))

After each window, r sends every rank it projects to one non-blocking message (``Isend`` of an
int32 buffer, on a duplicate of the BSP communicator): the window's end time followed by
``(source, step)`` pairs of the window's spikes for that rank; with no spikes it is a null
message carrying only the time.  MPI keeps messages between two ranks in order, so ``known[q]``
only grows.  When the horizon does not move past ``now``, r blocks in ``Probe`` for any message.

Window length: a rank that simulates a long window keeps its targets waiting for the whole of
it; with windows as long as the horizon allows, two coupled ranks fall into ping-pong (each one
computes while the other waits for its time stamp).  So by default a window is at most half the
smallest lookahead from this rank to the ranks it projects to: its targets receive a time stamp
while they still have work, and computing overlaps on all ranks; ``window`` sets the cap instead.

Deadlock-freedom: every delay is at least one step, so the rank with the smallest ``now`` can
always advance once the messages already sent to it arrive (each source q has ``now_q >= now``
and has told r so); at the end every rank receives until each source reported T, and only then
waits for its own sends, so no send is left unmatched.

Synchronisations (``syncs``): blocking waits, the times a rank had to stop and wait for a message
because its inputs did not yet allow it to advance (max over ranks).  ``messages`` counts the
time-advance messages (all ranks); ``null_messages`` those without spikes.
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ...util.progress import Progress
from ...runtime import BSP
from .bsp_mode import DEFAULT_WINDOW_CAP
from .local import SPIKE, LocalSim
from .network import LocalNetwork, NetworkSpec
from .result import RunResult, build_and_simulate, gather_spikes

#: Tag of time-advance messages on the mode's own communicator.
_TAG = 17


class _Peers:
    """This rank's side of the point-to-point traffic: what each source rank reported, and counters."""

    def __init__(self, comm: MPI.Comm, sim: LocalSim, lookahead: dict[int, int]):
        self.comm = comm
        self.sim = sim
        self.lookahead = lookahead
        self.known = {q: 0 for q in lookahead}
        self.status = MPI.Status()
        self.sends: list[tuple[MPI.Request, np.ndarray]] = []
        self.msgs_out = self.msgs_in = self.null_out = 0
        self.bytes_out = self.bytes_in = 0
        self.waits = 0
        self.wait_s = 0.0

    def horizon(self, steps: int, window: int) -> int:
        h = min(steps, self.sim.now + window)
        for q, d in self.lookahead.items():
            h = min(h, self.known[q] + d)
        return h

    def drain(self) -> None:
        """Receive every message that has arrived (never blocks)."""
        while self.comm.Iprobe(MPI.ANY_SOURCE, _TAG, self.status):
            self._recv()

    def wait(self) -> None:
        """Block until one message arrives and receive it (one synchronisation)."""
        t0 = time.perf_counter()
        self.comm.Probe(MPI.ANY_SOURCE, _TAG, self.status)
        self.wait_s += time.perf_counter() - t0
        self.waits += 1
        self._recv()

    def _recv(self) -> None:
        src = self.status.Get_source()
        buf = np.empty(self.status.Get_count(MPI.INT32_T), dtype=np.int32)
        self.comm.Recv([buf, MPI.INT32_T], source=src, tag=_TAG)
        self.msgs_in += 1
        self.bytes_in += buf.nbytes
        self.known[src] = int(buf[0])
        if buf.size > 1:
            spikes = np.empty((buf.size - 1) // 2, dtype=SPIKE)
            spikes["src"] = buf[1::2]
            spikes["step"] = buf[2::2]
            self.sim.receive(spikes)

    def send(self, dest: int, time_stamp: int, spikes: np.ndarray) -> None:
        """Tell ``dest`` this rank has simulated up to ``time_stamp``, with the window's spikes for it.

        Adds to this rank's traffic ``4 + 8·len(spikes)`` bytes and one message out, and as much
        into ``dest``.
        """
        buf = np.empty(1 + 2 * spikes.size, dtype=np.int32)
        buf[0] = time_stamp
        buf[1::2] = spikes["src"]
        buf[2::2] = spikes["step"]
        self.sends.append((self.comm.Isend([buf, MPI.INT32_T], dest=dest, tag=_TAG), buf))
        self.msgs_out += 1
        self.null_out += spikes.size == 0
        self.bytes_out += buf.nbytes
        if len(self.sends) >= 256:  # let finished sends go, keep the rest (and their buffers) alive
            done = MPI.Request.Testsome([r for r, _ in self.sends]) or []
            gone = set(done)
            self.sends = [s for i, s in enumerate(self.sends) if i not in gone]

    def finish(self, steps: int) -> None:
        """Receive until every source rank reported ``steps``, then complete this rank's sends."""
        while any(t < steps for t in self.known.values()):
            self.wait()
        MPI.Request.Waitall([r for r, _ in self.sends])
        self.sends.clear()


def default_window(net: LocalNetwork, cap: int = DEFAULT_WINDOW_CAP) -> int:
    """Half the smallest lookahead from this rank to its targets (at least 1, at most ``cap``)."""
    return min(cap, max(1, min(net.out_lookahead.values(), default=2 * cap) // 2))


def simulate_async(bsp: BSP, net: LocalNetwork, steps: int, *, window: int | None = None,
                   progress: bool = False) -> RunResult:
    """Simulate ``steps`` steps of ``net`` asynchronously (collective at the start and the end).

    ``window``: the most steps one window may cover (default :func:`default_window`).
    """
    window = default_window(net) if window is None else window
    lookahead = int(bsp.allreduce(np.int64(min(net.lookahead.values(), default=DEFAULT_WINDOW_CAP)), op="min"))
    comm = bsp.comm.Dup()
    try:
        sim = LocalSim(net, window)
        peers = _Peers(comm, sim, net.lookahead)
        out_ranks = net.out_ranks
        show = Progress("snn async", steps, enabled=progress and bsp.pid == 0, unit="step")
        windows = 0
        bsp.sync("ready")
        t0 = time.perf_counter()
        while sim.now < steps:
            peers.drain()
            h = peers.horizon(steps, window)
            if h <= sim.now:
                peers.wait()
                continue
            spikes = sim.advance(h)
            windows += 1
            idx, ranks = sim.destinations(spikes)
            for q in out_ranks:
                peers.send(q, h, spikes[idx[ranks == q]])
            show(h)
        peers.finish(steps)
        wall = time.perf_counter() - t0
    finally:
        comm.Free()
    bsp.sync("async simulation")  # the ledger row whose work is the asynchronous phase
    mx = bsp.allreduce(np.array([wall, peers.waits, peers.wait_s, windows, window], dtype=np.float64), op="max")
    tot = bsp.allreduce(np.array([peers.msgs_out, peers.null_out, peers.bytes_out, windows], dtype=np.int64))
    spike_steps, spike_ids = gather_spikes(bsp, *sim.fired())
    return RunResult("async", bsp.nprocs, net.spec.neurons, steps, net.spec.lif.dt_ms, spike_steps, spike_ids,
                     float(mx[0]), 0.0, interval=lookahead, syncs=int(mx[1]),
                     sync_kind="blocking waits for a peer's time stamp (max over ranks)",
                     messages=int(tot[0]),
                     extra={"null_messages": int(tot[1]), "message_bytes": int(tot[2]),
                            "windows_max": int(mx[3]), "windows_total": int(tot[3]),
                            "wait_s_max": float(mx[2]), "window_max": int(mx[4])})


def run_async(bsp: BSP, spec: NetworkSpec, steps: int, *, window: int | None = None,
              progress: bool = False) -> RunResult:
    """Build the network (one BSP superstep) and simulate it asynchronously (collective).

    Rank 0's result carries the spike trains and the ledger: the set-up and collection
    supersteps, and one superstep "async simulation" whose work is the whole asynchronous phase
    (its point-to-point traffic is counted in the result, not in the ledger).
    """
    return build_and_simulate(bsp, spec,
                              lambda b, net: simulate_async(b, net, steps, window=window, progress=progress))
