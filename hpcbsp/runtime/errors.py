"""The exceptions of the BSP runtime: one class per kind of failure, all under :class:`BSPError`.

Catch what you mean::

    BSPError            anything below (a rule of the model broken, or a rank failed)
    +-- UsageError      this rank broke a rule at a call (a put out of bounds, a wrong dtype, a
    |                   call on a closed context); raised on this rank only, at the call
    +-- Divergence      the ranks made different collective calls; raised on every rank at once
    +-- PeerFailed      another rank failed; this rank did nothing wrong and stops
    +-- SyncTimeout     a collective call (or its data exchange) waited longer than its ``timeout``
    +-- BadInput        every rank raises the same error about bad input (a damaged checkpoint,
                        a launcher that does not match the MPI library)

How an uncaught one is reported (:mod:`hpcbsp.runtime.failure.report`): :class:`BadInput` once, on rank
0, as one line; :class:`Divergence` with the traceback of the lowest rank only;
:class:`PeerFailed` as one line, by one rank only (the lowest that did not fail: its
``reports``); :class:`SyncTimeout` as one line per rank naming the program's line that
waited; every other kind with the rank's traceback.
"""


class BSPError(RuntimeError):
    """A BSP program broke a rule of the model or a rank failed (the base of every kind)."""


class UsageError(BSPError):
    """This rank broke a rule of the model at a call that can check it locally.

    Examples: a put outside the target's part, values that do not convert to the coarray's
    dtype, a pid that is not a rank, a collective call on a context that is closed or failed.
    """


class Divergence(BSPError):
    """The ranks made different collective calls (one registers a coarray while another syncs,
    one left the BSP block while others wait).  Every rank raises it in the same control step,
    with the same message: what each group of ranks was doing, its ranks as ranges.

    ``reports`` is true on one rank only (the lowest): uncaught, the divergence is printed there
    and nowhere else, one message for the job however many ranks it has."""

    def __init__(self, message: str = "", *, reports: bool = True) -> None:
        super().__init__(message)
        self.reports = reports


class PeerFailed(BSPError):
    """Another rank failed; this rank did nothing wrong and stops.  Raised at this rank's next
    collective call (or at its next mailbox ``send``/``sync`` after a handler failed elsewhere);
    reported as one line, not a traceback.

    ``reports`` is true on one surviving rank only (the lowest that did not fail, as far as this
    rank knows): uncaught, the line is printed there and nowhere else, so that a job of P ranks
    prints the failed ranks' own reports and one line, not P - 1 copies of it."""

    def __init__(self, message: str = "", *, reports: bool = True) -> None:
        super().__init__(message)
        self.reports = reports


class SyncTimeout(BSPError):
    """A collective BSP call waited longer than its ``timeout`` (the call's or the context's).

    The waiting collective cannot be completed or cancelled, so the job cannot go on: uncaught,
    it ends the job (see :func:`hpcbsp.runtime.failure.guards.excepthook`).
    """


class BadInput(BSPError):
    """Bad input that every rank found together and reports with the same message (a missing,
    damaged or foreign checkpoint; a launcher whose world does not match MPI's; a bad value in an
    environment variable every rank reads: :mod:`.environment`).  Reported once, on rank 0,
    without a traceback."""


__all__ = ["BSPError", "UsageError", "Divergence", "PeerFailed", "SyncTimeout", "BadInput"]
