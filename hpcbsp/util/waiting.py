"""Waiting with a deadline: the one polling loop of the control step, the FA-BSP quiescence and
the parameter server.

Every wait in hpcbsp that must not hang polls: it calls a non-blocking test until the test has a
result, does something useful or pauses in between, and gives up at a deadline.  (A rank blocked
inside MPI spins on its core, which on an oversubscribed machine steals the time the others need;
and a blocking call cannot be bounded.)  What a pause does is the caller's to give: in hpcbsp
always the one rule of the wait modes, :class:`hpcbsp.runtime.superstep.waiting.Naps` (this
layer imports nothing of hpcbsp).
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


#: What a ``test`` returns when it did some work but is not finished: the wait is not idle.
BUSY = object()


def poll(test: Callable[[], T | None], *, deadline: float | None = None,
         expired: Callable[[], BaseException] | None = None, until: float | None = None,
         pause: Callable[[], object] | None = None, patience: int = 0) -> T | None:
    """Call ``test()`` until it returns something other than None (or :data:`BUSY`); return that.

    A call that returns None was idle.  After more than ``patience`` idle calls in a row (a
    :data:`BUSY` call starts the count again), every idle call is followed by a look at the
    bounds and then ``pause()`` (progress on other work, or a sleep; default: nothing).
    ``deadline`` (a ``time.monotonic()`` value) is a hard bound: once it has passed, the
    exception that ``expired()`` returns is raised.  ``until`` is a soft bound: once it has passed,
    None is returned.  The clock is read only when a bound is given, and never while the test is
    busy, so a wait that keeps doing work is not cut short.
    """
    bounded = deadline is not None or until is not None
    idle = 0
    while True:
        got = test()
        if got is BUSY:
            idle = 0
            continue
        if got is not None:
            return got
        idle += 1
        if idle <= patience:
            continue
        if bounded:
            now = time.monotonic()
            if deadline is not None and now > deadline:
                raise (expired() if expired is not None else TimeoutError("wait timed out"))
            if until is not None and now >= until:
                return None
        if pause is not None:
            pause()

