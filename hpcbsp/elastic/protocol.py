"""The parameter server's protocol: tags, commands, results and the bounded waits, shared by
the server (:mod:`.server`) and the workers (:mod:`.worker`).

Protocol (point-to-point on an explicit communicator; :mod:`.wire` has the layouts).  A push or
a reply is a header message of two int64 and the ``P`` values, sent straight from the sender's
own array (no copy into a message buffer):

* reply, server -> worker: header ``[command, version]`` (tag ``Tag.REPLY``), then the weights
  in their own dtype (float64 for the numpy models, float32 for torch models) in pieces
  (:func:`.wire.pieces`, tag ``Tag.REPLY_DATA``; MPI keeps their order); the server sends one
  at the start and one per release; ``command`` is ``CONTINUE`` or ``STOP``.
* push, worker -> server: header ``[version computed on, iteration]`` (tag ``Tag.PUSH``), then
  the gradient (tag ``Tag.PUSH_DATA``), in the weights' dtype or a compressed format
  (``grad_format``: float16 or bfloat16, decoded to float32 by the server before the policy
  sees it).

A worker pushes once per reply and waits for the next reply, so the server sees every push time
(its clock at receipt) and can withhold a reply: that is all a policy needs.  The server keeps
one push posted per computing worker and serves whichever arrives first.  A worker posts the
receives of its next reply before it pushes, so the server's reply never waits for them.

The server sends the weights from the array it updates, so it changes them only when no piece
of them is in flight (the workers receiving them are waiting, so this is short).  When a push is
applied alone and its worker released at once (ASP), the update is made a piece at a time and
each piece sent as soon as it is final (:class:`.coordinator.Stream`): the reply travels while
the rest is updated, on the worker's core.

Where the server and every worker are on one node, the weights do not travel at all
(:mod:`.transport`, ``transport="auto"``): they live in a shared-memory window that the server
updates in place; a reply is its header alone, after which the worker copies the weights out of
the window and acknowledges (8 bytes).  The server changes the weights only when every reply
has been acknowledged.  An update streamed to its worker (ASP's, as above) is announced in the
window chunk by chunk, and the worker copies each chunk while the server updates the next,
before the header arrives.  A gradient in the weights' own dtype, float16 or bfloat16 does not travel either there:
the push is its header, and the worker writes the gradient into a slot of its own in the
window, a chunk at a time, each of which the server reads as soon as it is written
(:mod:`.transport` has the rules).

h-relation per iteration of worker ``w``: the worker sends ``16 + g P`` bytes and receives
``16 + w P`` bytes (``w``, ``g``: bytes per weight and per gradient value: 8 for float64, 4 for
float32, 2 for float16/bfloat16), in 2 messages out and ``1 + ceil(w P / 2^20)`` in; the server
receives and sends ``n`` such pushes and replies per round of pushes.  With the shared window a
reply is 16 bytes in 1 message, and the worker sends a third message, the 8-byte
acknowledgement, and copies the ``w P`` bytes out of the window itself; with its gradient slot
the push is 16 bytes in 1 message too, and the worker writes the ``g P`` bytes into the window.

Both sides take the communicator explicitly; ``None`` means a private duplicate of
``MPI.COMM_WORLD`` (made and freed collectively by the server and every worker), so the
protocol's tags cannot meet other traffic.

Every wait polls instead of blocking inside MPI, so that it is bounded by ``timeout`` (a broken
run fails instead of hanging), and between polls it does what the wait mode says
(:mod:`hpcbsp.runtime.superstep.waiting`; ``wait=`` of :func:`serve` and :func:`work`, ``$HPCBSP_WAIT``,
agreed by all ranks at the start): ``spin`` where every rank has a core (lowest latency;
``python -m hpcbsp.bench elastic`` measures it; the diagnosis: docs/notes/performance-journal.md,
"Parameter server and allreduce, float32"), ``yield``
where ranks share cores (a rank blocked in MPI would spin on the core a worker's compute needs:
short yields, then naps of an eighth of the time waited).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
from mpi4py import MPI

from ..runtime.errors import SyncTimeout
from ..runtime.superstep.waiting import Naps
from ..util.waiting import poll
from .runlog import RunLog

__all__ = ["Tag", "CONTINUE", "STOP", "ServerTimeout", "ServerResult", "WorkerResult", "poll_until", "wait_request",
           "wait_all"]



class Tag(IntEnum):
    """The tags of the protocol's messages (on its own communicator, so they meet no other traffic)."""

    PUSH = 7101        #: worker -> server: a push's header
    REPLY = 7102       #: server -> worker: a reply's header
    PUSH_DATA = 7103   #: worker -> server: the push's gradient
    REPLY_DATA = 7104  #: server -> worker: the weights, in pieces
    ACK = 7105         #: worker -> server: the weights were copied out of the shared window
    SHARD = 7106       #: leader shard -> other shards: a decision or a request (:mod:`.shards`)
    SHARD_DATA = 7107  #: a shard's weights and held gradients, to the leader or from it


#: A reply's command: compute again, or stop.
CONTINUE = 0
STOP = 1


class ServerTimeout(SyncTimeout, TimeoutError):
    """A wait of the parameter server, a worker or the allreduce baseline exceeded its bound.

    A :class:`hpcbsp.SyncTimeout`: uncaught, it is reported as one line naming the rank and ends
    the job, as a collective's timeout does (:mod:`hpcbsp.runtime.api.runner`)."""


@dataclass
class ServerResult:
    """What rank 0 returns."""

    policy: str
    log: RunLog
    policy_stats: dict[str, Any]
    weights: np.ndarray


@dataclass
class WorkerResult:
    """What a worker rank returns: its iterations, time spent waiting for replies, versions seen,
    and how many replies it copied chunk by chunk while the server updated them (``streamed``:
    the shared window's pipelined path, :mod:`.transport`)."""

    iterations: int = 0
    blocked_s: float = 0.0
    versions: list[int] = field(default_factory=list)
    streamed: int = 0

def poll_until(test: Callable[[], Any], until: float, timeout_at: float, what: str, mode: str = "yield") -> Any:
    """Call ``test()`` until it returns something other than None, pausing between as the wait
    ``mode`` says (``"spin"`` or ``"yield"``, :class:`hpcbsp.runtime.superstep.waiting.Naps`).

    Returns None when ``until`` (a soft deadline, ``time.monotonic`` clock) passes; raises
    :class:`ServerTimeout` when ``timeout_at`` passes.
    """
    return poll(test, deadline=timeout_at, until=until, pause=Naps(mode),
                expired=lambda: ServerTimeout(f"parameter server: no {what} within the timeout"))


def wait_request(req: MPI.Request, timeout: float, what: str, mode: str = "yield") -> None:
    deadline = time.monotonic() + timeout
    poll_until(lambda: True if req.Test() else None, np.inf, deadline, what, mode)


def wait_all(reqs: list[MPI.Request], timeout: float, what: str, mode: str = "yield") -> None:
    deadline = time.monotonic() + timeout
    poll_until(lambda: True if MPI.Request.Testall(reqs) else None, np.inf, deadline, what, mode)


