"""Output files: check them before the work, so that a bad path never costs a finished run."""
from __future__ import annotations

import os


class OutputError(ValueError):
    """An output path that cannot be written."""


def prepare_output(path: str | os.PathLike[str], what: str = "output") -> str:
    """Create ``path``'s missing parent folders and check that the file can be written there.

    Call it when the command starts, before any measurement: the error (:class:`OutputError`,
    naming ``what`` and the reason) then comes at once instead of after minutes of work.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(f"{what} {path} is a folder; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the folder for {what} {path}: {exc.strerror or exc}") from None
    probe = os.path.join(parent, f".hpcbsp-write-test-{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise OutputError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    return path
