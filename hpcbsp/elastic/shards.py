"""A sharded parameter server: ``S`` server ranks, each holding one key range of the weights.

Layout (:mod:`.keyranges`): the weights ``0..P-1`` are cut into ``S`` contiguous key ranges
(sizes differing by at most one); ranks ``0..S-1`` of the server's communicator are the shards
(shard ``s`` holds range ``s``), ranks ``S..S+n-1`` the workers.  :func:`placed` reorders a
communicator so that the shards sit one per node where the job spans nodes (:func:`.keyranges.server_ranks`).

Each shard runs the single server's round (:class:`~.round.ServerRound`, whose
:meth:`~.round.ServerRound.follow` is a follower's loop) on its key range: a
worker sends every shard the push header and that shard's slice of its gradient, all at once
(non-blocking), and receives from every shard a reply header and that shard's slice of the
weights.  The policy decides once: shard 0, the *leader*, runs the policy on the push headers it
receives, and tells every other shard each decision before carrying it out (a :data:`Tag.SHARD`
message of ``6 + 3n`` float64 per push: the worker, the time, the gradients applied and dropped,
the workers released; :func:`encode`).  The others (*followers*) take the pushes in the leader's
order and apply its decisions (:class:`Follow`) with the same coordinator code, so every update
of every key is the one the single server makes, bit for bit (the SGD update is element-wise).
The leader also tells the followers when the run stops for its duration, and asks them for
their weights (an evaluation, the result) and held gradients (a checkpoint): the checkpoint of a
sharded run is the single server's, whole, so it restores into any number of shards.

Memory per shard: ``P / S`` weights and ``n P / S`` held gradients (the policy's) and, with
messages, ``n P / S`` receive buffers (:func:`.keyranges.shard_memory`), plus ``P`` on the
leader while it gathers the weights for an evaluation or a checkpoint.  Transiently, an update
makes one row of temporaries (``P / S``), a follower holds its share's message while it takes it
(``(1 + n) P / S``), and the leader one share at a time while it hands them out.

With ``S > 1`` the weights travel as messages (the shared-memory window holds one server's
weights); ``S = 1`` is the single server, unchanged.
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from .coordinator import Coordinator
from .keyranges import key_ranges, server_ranks
from .policies.base import Decision, SyncPolicy
from .protocol import Tag, poll_until, wait_all

__all__ = ["placed", "Follow", "Leader",
           "receive_share", "encode", "decode", "PUSH", "STOPPED", "GATHER", "END", "HEAD"]

#: Kinds of the leader's messages: a decision on a push, the run's stop, a request for the
#: weights (and held gradients), the end of the run.
PUSH, STOPPED, GATHER, END = 0, 1, 2, 3
#: Words of a message before its lists of workers.
HEAD = 6


def placed(comm: MPI.Comm, servers: int) -> MPI.Comm:
    """Collective: a new communicator of ``comm``'s ranks, its ranks ``0..servers-1`` the shards
    (:func:`server_ranks`), then the others in their order (the caller frees it)."""
    chosen = server_ranks(comm.allgather(MPI.Get_processor_name()), servers)
    order = chosen + [r for r in range(comm.Get_size()) if r not in chosen]
    return comm.Split(0, order.index(comm.Get_rank()))


def encode(kind: int, n: int, worker: int = -1, now: float = 0.0, decision: Decision | None = None) -> np.ndarray:
    """The leader's message: ``[kind, worker, now, #apply, #drop, #release, apply..., drop...,
    release...]`` as float64, ``6 + 3n`` long (``#apply`` -1: no decision, a push after the stop;
    for ``GATHER``, ``worker`` 1 asks for the held gradients too)."""
    msg = np.zeros(HEAD + 3 * n, dtype=np.float64)
    lists = (decision.apply, decision.drop, decision.release) if decision is not None else ((), (), ())
    msg[:HEAD] = (kind, worker, now, -1 if decision is None else len(lists[0]), len(lists[1]), len(lists[2]))
    at = HEAD
    for items in lists:
        msg[at:at + len(items)] = items
        at += len(items)
    return msg


def decode(msg: np.ndarray) -> tuple[int, int, float, Decision | None]:
    """``(kind, worker, now, decision)`` of :func:`encode`'s message."""
    kind, worker, now, na, nd, nr = (int(msg[0]), int(msg[1]), float(msg[2]), int(msg[3]), int(msg[4]), int(msg[5]))
    if na < 0:
        return kind, worker, now, None
    ids = msg[HEAD:].astype(np.int64).tolist()
    return kind, worker, now, Decision(tuple(ids[:na]), tuple(ids[na:na + nd]), tuple(ids[na + nd:na + nd + nr]))


class Follow(SyncPolicy):
    """A follower's policy: each push is decided as the leader said (:attr:`next`)."""

    name = "follow"

    def __init__(self) -> None:
        super().__init__()
        self.next = Decision()

    def start(self, n_workers: int, now: float) -> None:
        self.next = Decision()

    def on_push(self, worker: int, now: float) -> Decision:
        return self.next


class Leader:
    """Shard 0's messages to the other shards (``servers`` of them in all, on ``comm``)."""

    def __init__(self, comm: MPI.Comm, servers: int, n_workers: int, size: int, timeout: float, mode: str):
        self.comm, self.servers, self.n, self.timeout, self.mode = comm, servers, n_workers, timeout, mode
        self.ranges = key_ranges(size, servers)
        self._sent: list[tuple[MPI.Request, np.ndarray]] = []

    def hand_out(self, whole: Coordinator) -> Coordinator:
        """Send each follower its key range of ``whole`` (the run's coordinator, fresh or
        resumed), one after the other (a share and its message are let go before the next is
        made: the leader holds one more share's copies, not S - 1); return the leader's own."""
        for s, keys in enumerate(self.ranges[1:], start=1):
            req = self.comm.isend(whole.key_range(keys, Follow()), dest=s, tag=Tag.SHARD)
            wait_all([req], self.timeout, f"hand-out of shard {s}'s key range", self.mode)
            del req
        return whole.key_range(self.ranges[0])

    def _send(self, msg: np.ndarray) -> None:
        self._sent = [(r, m) for r, m in self._sent if not r.Test()]
        for s in range(1, self.servers):
            self._sent.append((self.comm.Isend(msg, dest=s, tag=Tag.SHARD), msg))

    def tell(self, worker: int, now: float, decision: Decision | None) -> None:
        """A :data:`~.coordinator.Tell`: the decision on ``worker``'s push, to every follower."""
        self._send(encode(PUSH, self.n, worker, now, decision))

    def stop(self, now: float) -> None:
        self._send(encode(STOPPED, self.n, now=now))

    def gather(self, coord: Coordinator, held: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The whole weights (and, with ``held``, the held gradients) at the leader's version."""
        assert coord.weights is not None
        self._send(encode(GATHER, self.n, worker=int(held)))
        size = self.ranges[-1].stop
        weights = np.empty(size, dtype=coord.weights.dtype)
        grads = np.empty((self.n, size), dtype=coord.weights.dtype) if held else None
        parts = {s: np.empty((self.n, k.stop - k.start), dtype=coord.weights.dtype)
                 for s, k in enumerate(self.ranges) if held and s > 0}  # (rows of a shard's keys)
        reqs = []
        for s, keys in enumerate(self.ranges[1:], start=1):
            reqs.append(self.comm.Irecv(weights[keys], source=s, tag=Tag.SHARD_DATA))
            if s in parts:
                reqs.append(self.comm.Irecv(parts[s], source=s, tag=Tag.SHARD_DATA))
        weights[self.ranges[0]] = coord.weights
        wait_all(reqs, self.timeout, "the shards' weights", self.mode)
        if grads is not None:
            grads[:, self.ranges[0]] = coord.held()
            for s, part in parts.items():
                grads[:, self.ranges[s]] = part
        return weights, grads

    def end(self) -> None:
        self._send(encode(END, self.n))
        wait_all([r for r, _ in self._sent], self.timeout, "delivery of the leader's last message", self.mode)


def receive_share(comm: MPI.Comm, timeout: float, mode: str) -> Coordinator:
    """A follower's coordinator, from the leader (:meth:`Leader.hand_out`)."""
    poll_until(lambda: True if comm.Iprobe(source=0, tag=Tag.SHARD) else None, np.inf,
               time.monotonic() + timeout, "key range from the leader shard", mode)
    share = comm.recv(source=0, tag=Tag.SHARD)
    assert isinstance(share, Coordinator)
    return share
