"""The server side of the parameter server, without transport: weights, held gradients, policy.

Both the virtual-clock simulator and the MPI server feed pushes to a :class:`Coordinator` and
carry out what it returns, so the two differ only in how time passes and how bytes move. The
coordinator also enforces the push/release protocol, so a faulty policy fails loudly instead of
deadlocking a run.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import copy as shallow_copy
from copy import deepcopy
from dataclasses import dataclass

import numpy as np

from ..kernels.update import WIRE16, convert, sgd_step
from .policies.base import Decision, SyncPolicy
from .runlog import RunLog

__all__ = ["Coordinator", "Outcome", "ProtocolError", "Stream", "Tell"]

#: ``tell(worker, now, decision)``: called by :meth:`Coordinator.push` once the policy has
#: decided on a push and before any update is made (``decision`` None: a push after the run
#: began to stop), so that a sharded server's leader can pass the decision on (:mod:`.shards`).
Tell = Callable[[int, float, "Decision | None"], None]


class ProtocolError(RuntimeError):
    """A push or a policy decision broke the protocol (push while held, release while computing...)."""


@dataclass(frozen=True)
class Outcome:
    """After one push: workers to send the weights to, and workers to tell to stop.

    ``streamed``: the pushing worker, when its update was applied alone and the new weights were
    already handed to the push's ``stream`` piece by piece (it is in ``release`` or ``stop`` too).
    """

    release: tuple[int, ...] = ()
    stop: tuple[int, ...] = ()
    streamed: tuple[int, ...] = ()


@dataclass(frozen=True)
class Stream:
    """Where an immediate update (ASP's) goes as it is made: the weights are updated piece by
    piece, in ``pieces``' order, and ``ready(piece)`` is called as each piece is final, so that
    a transport can send it while the next is updated.

    ``arrive``: for a gradient that is still arriving when it is pushed (a transport that
    delivers it piece by piece, in the same pieces), ``arrive(piece)`` returns once that piece of
    it may be read: the update reads each piece as soon as it is there, and any other use of the
    gradient (held, averaged, a whole update) waits for every piece first.  None: the gradient
    is whole."""

    pieces: Sequence[slice]
    ready: Callable[[slice], None]
    arrive: Callable[[slice], None] | None = None


class Coordinator:
    """Apply a policy's decisions to the global weights and keep the run's log.

    Parameters
    ----------
    policy : SyncPolicy
        Reset here for ``n_workers`` workers, all released at ``now`` with version 0.
    n_workers : int
        Number of workers.
    weights : numpy.ndarray or None
        Initial flat weights (copied; float32 stays float32, anything else becomes float64);
        None runs timing only (gradients are ignored).
    lr : float
        SGD step: update ``k`` (from 0) is ``weights -= lr_k * mean(applied gradients)`` with
        ``lr_k = lr / (1 + lr_decay * k)``.
    now : float
        Start time.
    lr_decay : float
        Inverse-time decay of the step (0: constant ``lr``).
    max_updates : int, optional
        Stop the run at the push that makes this many updates: the workers that push would
        release, and all waiting ones, are told to stop instead (no gradient is computed in vain).
    """

    #: Attributes a snapshot leaves out (:mod:`.snapshot`): how the weights are updated in place
    #: belongs to this run's transport (:meth:`keep_weights_in`), not to the state it resumes.
    TRANSIENT = ("_step",)
    _step: Callable[[np.ndarray, np.ndarray, float], np.ndarray] = staticmethod(sgd_step)

    def __init__(self, policy: SyncPolicy, n_workers: int, weights: np.ndarray | None, lr: float,
                 now: float = 0.0, max_updates: int | None = None, lr_decay: float = 0.0):
        self.policy = policy
        self.max_updates = max_updates
        self.n_workers = n_workers
        self.lr = float(lr)
        self.lr_decay = float(lr_decay)
        # float32 weights (torch models) stay float32, as do their gradients and updates.
        dtype = np.float32 if weights is not None and np.asarray(weights).dtype == np.float32 else np.float64
        self.weights = None if weights is None else np.array(weights, dtype=dtype).ravel()
        size = 0 if self.weights is None else self.weights.size
        self._grads = np.zeros((n_workers, size), dtype=dtype)
        self._pending = np.zeros(n_workers, dtype=bool)   # a gradient waits to be applied/dropped
        self._waiting = np.zeros(n_workers, dtype=bool)   # the worker waits to be released
        self._stopped = np.zeros(n_workers, dtype=bool)
        self._pushed_at = np.zeros(n_workers, dtype=np.float64)
        self.pulled_version = np.zeros(n_workers, dtype=np.int64)  # version each worker computes on
        self.version = 0
        self.stopping = False
        self.log = RunLog(n_workers)
        policy.reset(n_workers, now)

    @property
    def finished(self) -> bool:
        """True once every worker has been told to stop."""
        return bool(self._stopped.all())

    def push(self, worker: int, grad: np.ndarray | None, now: float, stream: Stream | None = None,
             tell: Tell | None = None) -> Outcome:
        """Worker ``worker`` pushed ``grad`` (computed on ``pulled_version[worker]``) at ``now``:
        values of any float dtype, or a 16-bit gradient's bits (float16, or uint16 for bfloat16:
        :data:`~hpcbsp.kernels.update.WIRE16`), decoded as the update or the held row reads them.

        ``stream``: when the policy applies this gradient alone, now, and releases its worker
        (ASP), the update is made piece by piece into ``stream`` (see :class:`Stream`) and the
        outcome names the worker in ``streamed``; its ``arrive`` says when each piece of ``grad``
        may be read.  ``tell``: told the policy's decision before it is carried out (:data:`Tell`).
        """
        if not 0 <= worker < self.n_workers:
            raise ProtocolError(f"push from unknown worker {worker}")
        if self._waiting[worker] or self._stopped[worker]:
            raise ProtocolError(f"worker {worker} pushed while it should be waiting or stopped")
        if grad is not None and self.weights is not None and grad.shape != self.weights.shape:
            raise ProtocolError(f"worker {worker} pushed a gradient of shape {grad.shape}; the "
                                f"weights have shape {self.weights.shape}")
        self.log.pushes[worker] += 1
        self.log.push_times.append((worker, now))
        if self.stopping:
            if tell is not None:
                tell(worker, now, None)
            self._stopped[worker] = True
            return Outcome(stop=(worker,))
        self._pending[worker] = True
        self._waiting[worker] = True
        self._pushed_at[worker] = now
        decision = self.policy.on_push(worker, now)  # (policies decide on times, never on values)
        if tell is not None:
            tell(worker, now, decision)
        direct = None
        if self.weights is not None:
            if grad is None:
                raise ProtocolError(f"worker {worker} pushed no gradient to a server that holds weights")
            if decision.apply == (worker,) and (grad.dtype == self.weights.dtype or grad.dtype in WIRE16) \
                    and grad.ndim == 1 and grad.flags.c_contiguous:
                direct = grad  # applied alone, now (ASP): straight from the message or slot, one pass
        if stream is not None and (direct is None or worker not in decision.release):
            if stream.arrive is not None and grad is not None:  # the whole gradient before any use
                for piece in stream.pieces:
                    stream.arrive(piece)
            stream = None  # the new weights go out with the replies, whole
        if self.weights is not None and direct is None:
            if grad is not None and grad.dtype in WIRE16:  # (a 16-bit gradient's bits: decoded into the row)
                convert(self._grads[worker], grad)
            else:
                self._grads[worker] = grad
        if decision.apply:
            self._apply(decision.apply, direct, stream)
        for w in decision.drop:
            self._consume(w)
            self.log.dropped[w] += 1
        for w in decision.release:
            if not self._waiting[w] or self._pending[w]:
                raise ProtocolError(f"{self.policy.name}: released worker {w}, which is not waiting "
                                    "or whose gradient was neither applied nor dropped")
            self._waiting[w] = False
            self.log.wait_s[w] += now - self._pushed_at[w]
            self.pulled_version[w] = self.version
        streamed = (worker,) if stream is not None else ()
        if self.max_updates is not None and self.version >= self.max_updates:
            self._stopped[list(decision.release)] = True
            return Outcome(stop=tuple(decision.release) + self.stop(now), streamed=streamed)
        return Outcome(release=tuple(decision.release), streamed=streamed)

    def keep_weights_in(self, storage: np.ndarray,
                        step: Callable[[np.ndarray, np.ndarray, float], np.ndarray] = sgd_step) -> None:
        """Hold the weights in ``storage`` from now on (their values copied there), for a
        transport that shares them with the workers (a shared-memory window): flat, of the
        weights' dtype and size, C-contiguous.  ``step(w, g, lr)`` makes the one-gradient
        updates of them in place from now on (default :func:`~hpcbsp.kernels.update.sgd_step`;
        the window's :class:`~.transport.WindowStores` picks its kind of store)."""
        if self.weights is None:
            raise ProtocolError("keep_weights_in: this coordinator holds no weights (timing only)")
        if storage.shape != self.weights.shape or storage.dtype != self.weights.dtype \
                or not storage.flags.c_contiguous:
            raise ValueError(f"keep_weights_in: storage must be a C-contiguous {self.weights.dtype} "
                             f"array of shape {self.weights.shape}")
        storage[:] = self.weights
        self.weights = storage
        self._step = step

    def key_range(self, keys: slice, policy: SyncPolicy | None = None) -> "Coordinator":
        """A coordinator of the same run for the weights ``keys`` alone (their values and the
        held gradients' copied; every count, clock and flag the same): one shard of a sharded
        server (:mod:`.shards`), driven by ``policy`` where given (a follower's)."""
        part = shallow_copy(self)
        part.__dict__.pop("_step", None)  # (the transport's way of storing, not the run's state)
        part.policy = deepcopy(self.policy) if policy is None else policy
        part.log = deepcopy(self.log)
        for name in ("_pending", "_waiting", "_stopped", "_pushed_at", "pulled_version"):
            setattr(part, name, getattr(self, name).copy())
        part.weights = None if self.weights is None else self.weights[keys].copy()
        part._grads = self._grads[:, keys].copy()
        return part

    def held(self) -> np.ndarray:
        """The gradients held for the workers, one row each (a view: rows of workers with
        nothing pending hold stale values)."""
        return self._grads

    def with_arrays(self, weights: np.ndarray, held: np.ndarray) -> "Coordinator":
        """This run's coordinator holding ``weights`` and the gathered ``held`` gradients (a
        sharded server's whole state, for a checkpoint: :meth:`key_range` undoes it)."""
        whole = shallow_copy(self)
        whole.weights, whole._grads = weights, held
        return whole

    def rejoin(self) -> tuple[int, ...]:
        """After a restart: the workers that were computing, to be sent the current weights.

        Their iteration in progress was lost with the old processes; they start it again from
        the current version.  Held workers stay held (their gradients are kept here).
        """
        computing = tuple(int(w) for w in np.flatnonzero(~self._waiting & ~self._stopped))
        self.pulled_version[list(computing)] = self.version
        return computing

    def stop(self, now: float) -> tuple[int, ...]:
        """Stop the run: return the waiting workers (to be told now); later pushes get STOP."""
        self.stopping = True
        waiting = tuple(int(w) for w in np.flatnonzero(self._waiting & ~self._stopped))
        for w in waiting:
            self.log.wait_s[w] += now - self._pushed_at[w]
            self._waiting[w] = False
            self._stopped[w] = True
        return waiting

    def _consume(self, w: int) -> None:
        if not self._pending[w]:
            raise ProtocolError(f"{self.policy.name}: gradient of worker {w} used twice or never pushed")
        self._pending[w] = False

    def _lr_now(self) -> float:
        """The step of the next update (``lr / (1 + lr_decay * version)``)."""
        return self.lr / (1.0 + self.lr_decay * self.version) if self.lr_decay else self.lr

    def _apply(self, workers: tuple[int, ...], direct: np.ndarray | None = None,
               stream: Stream | None = None) -> None:
        """Apply the pending gradients of ``workers`` as one update (``direct``: the one worker's
        gradient itself, not copied into its row; ``stream``: made piece by piece into it)."""
        idx = np.asarray(workers, dtype=np.int64)
        for w in workers:
            self._consume(w)
        self.log.staleness.extend((self.version - self.pulled_version[idx]).tolist())
        self.log.applied[idx] += 1
        if self.weights is not None:
            lr = self._lr_now()
            if idx.size > 1:  # numpy's mean of the rows, bit for bit, in one row's memory (not k + 1)
                mean = self._grads[idx[0]].copy()
                for w in idx[1:]:
                    mean += self._grads[w]  # (added in order, as numpy's reduction over rows does)
                mean /= idx.size
                mean *= lr
                self.weights -= mean
            elif stream is not None and direct is not None:  # the same pass, a piece at a time
                for piece in stream.pieces:
                    if stream.arrive is not None:
                        stream.arrive(piece)
                    self._step(self.weights[piece], direct[piece], lr)
                    stream.ready(piece)
            else:  # weights -= lr * gradient in one compiled pass, with numpy's rounding
                self._step(self.weights, self._grads[idx[0]] if direct is None else direct, lr)
        self.version += 1
        self.log.updates = self.version
