"""The one error type of the cost models: input that cannot be used (the CLI exits 2 on it)."""


class CostInputError(ValueError):
    """Bad input to a cost model: a malformed file, a missing column, an impossible parameter.

    The message is one line meant for the user; the command line prints it and exits with
    status 2, without a traceback.
    """
