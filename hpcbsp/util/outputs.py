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


def prepare_dir(path: str | os.PathLike[str], what: str = "output folder") -> str:
    """Check that ``path`` is, or can become, a writable folder; create nothing.

    Call it when the command starts: an existing file in the way, or a place without write
    permission, is reported (:class:`OutputError`) before the work instead of after it.
    """
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{what} {path} exists and is not a folder; give a folder name")
    probe = os.path.abspath(path)
    while not os.path.exists(probe):  # the nearest existing ancestor must let us create the rest
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise OutputError(f"cannot create {what} {path}: {probe} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {what} {path}: no write permission in {probe}")
    return path
