"""The one exception type of the BSP runtime."""


class BSPError(RuntimeError):
    """A BSP program broke a rule of the model or a rank failed.

    Raised at the call that broke the rule where it can be detected locally (a put out of bounds,
    a wrong dtype), and on every rank at once where it needs agreement (registration that differs
    between ranks, a rank that left while others synchronise).

    ``remote`` is True when this rank did nothing wrong and is stopping because another rank
    failed; the runner then prints one line instead of a traceback.
    """

    def __init__(self, message: str, *, remote: bool = False):
        super().__init__(message)
        self.remote = remote
