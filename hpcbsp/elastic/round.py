"""One server's round on its key range: receive a push, apply it by the policy, publish.

A :class:`ServerRound` is what a parameter server does with one push, on the weights it holds:
the single server (:mod:`.server`) holds them all, a shard of a sharded server one key range
(:mod:`.shards`).  Every server keeps a push posted per computing worker (a header and, unless
the gradient comes through the shared window, the values of its key range), and carries out a
push in :meth:`ServerRound.take`: the gradient is read, the :class:`~.coordinator.Coordinator`
applies it as its policy decides, and the workers it releases or stops get their replies
(header and weights, or the header alone with the shared window).  The round never decides: the
single server and the leader shard ask their policy, the other shards follow the leader's
decisions, so a shard is the very same round on fewer keys.

Workers are ranks ``first..first+n-1`` of the communicator (``first`` = the number of servers).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import numpy as np
from mpi4py import MPI

from .coordinator import Coordinator, Outcome, Stream
from .keyranges import ShardMemory
from .protocol import CONTINUE, STOP, Tag, poll_until, wait_all, wait_request
from .shards import END, GATHER, HEAD, PUSH, STOPPED, Follow, Leader, decode, receive_share
from .transport import SharedWeights
from .wire import Wire, pieces

__all__ = ["ServerRound"]


class ServerRound:
    """The receives, the update and the replies of one server (see the module docstring).

    ``coord`` holds this server's weights (updated in place and sent from: never rebound during
    the run); ``shared`` the window where the weights (and the gradients) live, or None;
    ``first``: the rank of worker 0; ``peers``: the leader shard's messages to the others.
    :meth:`open` makes the round of this rank.
    """

    def __init__(self, comm: MPI.Comm, coord: Coordinator, shared: SharedWeights | None, mode: str,
                 out_wire: Wire, in_wire: Wire, timeout: float, first: int = 1, peers: Leader | None = None):
        self.comm, self.coord, self.shared, self.mode, self.timeout = comm, coord, shared, mode, timeout
        self.in_wire, self.first, self.peers = in_wire, first, peers
        n = coord.n_workers
        current = coord.weights
        assert current is not None
        self.current = current
        self.parts = pieces(current.size, out_wire.storage.itemsize)
        self.slots = shared is not None and shared.grads is not None  # gradients through the window
        self.inbox = in_wire.alloc(0 if self.slots else n, current.size)
        self.in_head = np.zeros((n, 2), dtype=np.int64)
        self.out_head = np.zeros((n, 2), dtype=np.int64)
        self.head_recv: list[MPI.Request] = [MPI.REQUEST_NULL] * n
        self.data_recv: list[MPI.Request] = [MPI.REQUEST_NULL] * n
        self.head_sent: list[MPI.Request] = [MPI.REQUEST_NULL] * n
        # Pieces of the weights being sent, or (shared window) the workers' acknowledgements
        # still to come that they copied the weights: until these complete, the weights must not
        # change.
        self.in_flight: list[MPI.Request] = []
        self.acks = np.zeros((n, 1), dtype=np.int64)

    @classmethod
    @contextmanager
    def open(cls, comm: MPI.Comm, coord: Coordinator | None, shared: SharedWeights | None, mode: str,
             wires: tuple[Wire, Wire], timeout: float, servers: int = 1) -> Iterator["ServerRound"]:
        """This server rank's round, for the run: the single server's on ``coord`` (its weights
        kept in the window ``shared`` while the run lasts, if any); with ``servers`` > 1, the
        leader's (rank 0: ``coord``, the whole run's, is handed out a key range to each shard)
        or a follower's (its key range received; ``coord`` unused).  The window is closed on the
        way out (collective)."""
        peers = None
        if servers > 1 and comm.Get_rank() > 0:
            coord = receive_share(comm, timeout, mode)
        elif servers > 1:
            assert coord is not None and coord.weights is not None
            peers = Leader(comm, servers, coord.n_workers, coord.weights.size, timeout, mode)
            coord = peers.hand_out(coord)
        assert coord is not None
        with shared if shared is not None else nullcontext():
            if shared is not None:
                coord.keep_weights_in(shared.array, shared.stores)
            try:
                yield cls(comm, coord, shared, mode, *wires, timeout, first=servers, peers=peers)
            finally:
                if shared is not None:  # the weights leave the window before it goes
                    coord.keep_weights_in(np.empty_like(shared.array))

    def memory(self) -> ShardMemory:
        """The bytes of this server's buffers for the run: its weights, the held gradients'
        rows and the push receive buffers (:func:`.keyranges.shard_memory` says what they must be)."""
        return ShardMemory(self.current.nbytes, self.coord.held().nbytes, self.inbox.nbytes)

    @property
    def following(self) -> bool:
        """True on a shard that follows the leader's decisions (:meth:`follow` is its loop)."""
        return isinstance(self.coord.policy, Follow)

    def settle(self) -> None:
        """Wait until no worker is still receiving or copying the weights (before they change)."""
        wait_all(self.in_flight, self.timeout, "delivery of the weights to the workers", self.mode)
        self.in_flight.clear()
        if self.shared is not None:
            self.shared.sync()  # the workers' loads are done: this rank's next stores come after them

    def send_piece(self, w: int, piece: slice) -> None:
        self.in_flight.append(self.comm.Isend(self.current[piece], dest=self.first + w, tag=Tag.REPLY_DATA))

    def reply(self, w: int, command: int, streamed: bool = False) -> None:
        """Send worker ``w`` the command and this server's weights (unless ``streamed``: sent
        already, piece by piece, as the update made them)."""
        # The previous reply to w was received before w pushed again, so this wait is immediate.
        wait_request(self.head_sent[w], self.timeout, f"completion of the reply to worker {w}", self.mode)
        self.out_head[w] = (command, self.coord.version)
        rank = self.first + w
        if self.shared is not None:  # the weights are in the window: the header says they are ready
            self.shared.sync()
            self.in_flight.append(self.comm.Irecv(self.acks[w], source=rank, tag=Tag.ACK))
            self.head_sent[w] = self.comm.Isend(self.out_head[w], dest=rank, tag=Tag.REPLY)
            return
        self.head_sent[w] = self.comm.Isend(self.out_head[w], dest=rank, tag=Tag.REPLY)
        if not streamed:
            for piece in self.parts:
                self.send_piece(w, piece)

    def release(self, w: int, streamed: bool = False) -> None:
        """Post worker ``w``'s next push, then send it the weights."""
        rank = self.first + w
        self.head_recv[w] = self.comm.Irecv(self.in_head[w], source=rank, tag=Tag.PUSH)
        if not self.slots:
            self.data_recv[w] = self.comm.Irecv(self.inbox[w], source=rank, tag=Tag.PUSH_DATA)
        self.reply(w, CONTINUE, streamed)

    def pending(self) -> int | None:
        """A worker whose push header has arrived (None: none yet)."""
        idx, flag = MPI.Request.Testany(self.head_recv)
        return idx if flag and idx != MPI.UNDEFINED else None

    def stop(self, now: float) -> None:
        """Stop the run at ``now`` (run time): the other shards and the waiting workers are told
        at once."""
        if self.peers is not None:
            self.peers.stop(now)
        for w in self.coord.stop(now):
            self.reply(w, STOP)

    def take(self, w: int, t0: float, now: float | None = None) -> Outcome:
        """Carry out worker ``w``'s push: read it, apply it as the coordinator's policy decides
        (the leader tells the other shards the decision first), and reply to the workers
        released or stopped.  The push's time is ``now`` where given (a follower's: the
        leader's), else the ``time.monotonic`` clock since ``t0`` once the gradient is here."""
        coord, shared, timeout, mode = self.coord, self.shared, self.timeout, self.mode
        wait_request(self.head_recv[w], timeout, f"the push header of worker {w}", mode)
        self.head_recv[w] = MPI.REQUEST_NULL
        if not self.slots:
            wait_request(self.data_recv[w], timeout, f"the gradient of worker {w}, after its header", mode)
            self.data_recv[w] = MPI.REQUEST_NULL
        started = time.monotonic()
        if now is None:
            now = started - t0
        pushed_on = int(self.in_head[w][0])
        if not coord.stopping and pushed_on != coord.pulled_version[w]:
            raise RuntimeError(f"worker {w} pushed a gradient for version {pushed_on}, "
                               f"but was sent version {coord.pulled_version[w]}")
        self.settle()  # the push may change the weights
        push_no = int(self.in_head[w][1])
        if shared is not None:  # an update streamed to w makes the next version, a chunk at a time
            stream = Stream(shared.chunks, lambda piece, v=coord.version + 1: shared.publish(w, piece, v),  # type: ignore[misc]
                            self._arrival(shared, w, push_no, started + timeout) if self.slots else None)
        else:  # a piece of the reply sent as soon as it is updated
            stream = Stream(self.parts, lambda piece: self.send_piece(w, piece))
        grad = None
        if not coord.stopping:
            grad = shared.grads[w] if shared is not None and shared.grads is not None \
                else self.in_wire.decode(self.inbox[w])
        out = coord.push(w, grad, now, stream, None if self.peers is None else self.peers.tell)
        if shared is not None and self.slots and grad is not None:
            shared.take(w, push_no)  # (before any reply: w writes its next push only after both)
        for r in out.release:
            self.release(r, r in out.streamed)
        for r in out.stop:
            self.reply(r, STOP, r in out.streamed)
        return out

    def _arrival(self, shared: SharedWeights, w: int, push_no: int, deadline: float) -> Callable[[slice], None]:
        """Each chunk of worker ``w``'s gradient, push ``push_no``, read as soon as it is written."""
        def test_until(test: Callable[[], bool | None]) -> None:
            poll_until(test, np.inf, deadline, f"chunk of worker {w}'s gradient", self.mode)
        return lambda piece: shared.arrive(w, piece, push_no, test_until)

    def whole(self, held: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """All the weights (with ``held``, and the held gradients): this server's, or the
        leader's gathered from every shard (a copy, at the leader's version)."""
        if self.peers is not None:
            return self.peers.gather(self.coord, held)
        assert self.coord.weights is not None
        return self.coord.weights, self.coord.held() if held else None

    def finish(self) -> np.ndarray:
        """Wait for the last replies to complete and the weights to be delivered; returns all
        the weights (and lets the other shards end)."""
        for w in range(self.coord.n_workers):
            wait_request(self.head_sent[w], self.timeout, f"completion of the last reply to worker {w}", self.mode)
        self.settle()
        weights = self.whole()[0]
        if self.peers is not None:
            self.peers.end()
        return weights

    def follow(self) -> None:
        """A follower's loop: the leader's decisions carried out on this shard's key range, in
        the leader's order, until it says the run ended (:mod:`.shards`)."""
        comm, coord, policy = self.comm, self.coord, self.coord.policy
        assert isinstance(policy, Follow)
        msg = np.zeros(HEAD + 3 * coord.n_workers, dtype=np.float64)
        for w in coord.rejoin():  # (every worker, in a fresh run; as the leader does in a resumed one)
            self.release(w)
        while True:
            req = comm.Irecv(msg, source=0, tag=Tag.SHARD)
            poll_until(lambda: True if req.Test() else None, np.inf, time.monotonic() + self.timeout,
                       "message from the leader shard", self.mode)
            kind, worker, now, decision = decode(msg)
            if kind == PUSH:
                if decision is not None:
                    policy.next = decision
                self.take(worker, 0.0, now=now)
            elif kind == STOPPED:
                self.stop(now)
            elif kind == GATHER:
                assert coord.weights is not None
                sends = [comm.Isend(coord.weights, dest=0, tag=Tag.SHARD_DATA)]
                if worker:  # (the held gradients too)
                    sends.append(comm.Isend(np.ascontiguousarray(coord.held()), dest=0, tag=Tag.SHARD_DATA))
                wait_all(sends, self.timeout, "the weights to the leader shard", self.mode)
            elif kind == END:
                break
        self.finish()
