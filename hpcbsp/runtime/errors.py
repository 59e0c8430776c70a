"""The one exception type of the BSP runtime."""


class BSPError(RuntimeError):
    """A BSP program broke a rule of the model or a rank failed.

    Raised at the call that broke the rule where it can be detected locally (a put out of bounds,
    a wrong dtype), and on every rank at once where it needs agreement (registration that differs
    between ranks, a rank that left while others synchronise).

    ``remote`` is True when this rank did nothing wrong and is stopping because another rank
    failed; the runner then prints one line instead of a traceback.  ``collective`` is True when
    every rank raised this same error about bad input (a damaged checkpoint, say); the runner then
    prints the message once, on rank 0, without a traceback.  ``agreed`` is True when every rank
    learnt of the failure in the same completed control step (a divergence, or another rank's
    reported failure): the context's communicator is then quiet everywhere and can be freed.
    """

    def __init__(self, message: str, *, remote: bool = False, collective: bool = False,
                 agreed: bool = False):
        super().__init__(message)
        self.remote = remote
        self.collective = collective
        self.agreed = agreed


class SyncTimeout(BSPError):
    """A collective BSP call waited longer than its ``timeout`` (the call's or the context's).

    The waiting collective cannot be completed or cancelled, so the job cannot go on: uncaught,
    it ends the job (see :func:`hpcbsp.runtime.runner.excepthook`).
    """
