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


def env_number(name: str, kind: type[int] | type[float], minimum: float) -> int | float | None:
    """The number in environment variable ``name``, or None where it is unset or empty.

    Raises :class:`BSPError` with one line naming the variable and its value when it is not a
    finite number of ``kind`` of at least ``minimum`` (above zero when ``minimum`` is 0.0 for a
    float: a time), instead of a ``ValueError`` traceback from deep inside the runtime.
    """
    import math
    import os

    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    positive = kind is float and minimum == 0.0
    if value is None or not math.isfinite(value) or value < minimum or (positive and value <= 0):
        what = "a positive number" if positive else f"an integer >= {minimum:g}" if kind is int \
            else f"a number >= {minimum:g}"
        # Every rank reads the same environment (the launcher passes it on): a collective error,
        # reported once, without a traceback.
        raise BSPError(f"environment variable {name}={text!r} is not {what}: correct it or unset it "
                       "(docs/environment.md)", collective=True)
    return value
