"""Output files: check them before the work, so that a bad path never costs a finished run.

Every check writes a probe file (a unique name, removed at once) where the output will go, so
that it holds for every user (root included, for whom permission bits say nothing) and every
file system (``/proc``, a read-only mount, a full quota's refusal to create).  Missing parent
folders of an output file are created (the output would need them anyway); an output folder is
not (:func:`prepare_dir`: the probe goes to its nearest existing ancestor).  A regular file where
a folder of the path must be (``notes.txt/out.json``) is named as such (:func:`file_in_the_way`).
"""
from __future__ import annotations

import os
import tempfile


class OutputError(ValueError):
    """An output path that cannot be written; ``reason`` says why without naming the path."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


def _probe(folder: str, what: str, path: str) -> None:
    """Create and remove a file in ``folder``; :class:`OutputError` naming ``what`` if that fails."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".hpcbsp-write-test-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise OutputError(f"cannot write {what} {path}: {why}", f"nothing can be written there: {why}") from None


def file_in_the_way(path: str | os.PathLike[str]) -> str | None:
    """The nearest ancestor of ``path`` (as given: ``afile.txt`` for ``afile.txt/sub/x``) that
    exists and is not a folder, so that ``path``'s folders cannot be made; None if there is none."""
    path = os.fspath(path)
    here = os.path.dirname(os.path.normpath(path))
    while here and not os.path.isdir(here):
        if os.path.lexists(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return None


def prepare_parent(path: str | os.PathLike[str], what: str = "output") -> str:
    """Create ``path``'s missing parent folders and check that something can be written there
    (``path`` itself may be a file, a folder, or absent)."""
    path = os.fspath(path)
    blocker = file_in_the_way(path)
    if blocker is not None:
        raise OutputError(f"cannot create the folder for {what} {path}: {blocker} is a file, not a folder",
                          f"its folder cannot be created: {blocker} is a file, not a folder")
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise OutputError(f"cannot create the folder for {what} {path}: {why}",
                          f"its folder cannot be created: {why}") from None
    _probe(parent, what, path)
    return path


def prepare_output(path: str | os.PathLike[str], what: str = "output") -> str:
    """Create ``path``'s missing parent folders and check that the file can be written there.

    Call it when the command starts, before any measurement: the error (:class:`OutputError`,
    naming ``what`` and the reason) then comes at once instead of after minutes of work.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(f"{what} {path} is a folder; give a file name", "it is a folder")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise OutputError(f"cannot write {what} {path}: no write permission on the file",
                          "no write permission on the file")
    return prepare_parent(path, what)


def prepare_dir(path: str | os.PathLike[str], what: str = "output folder") -> str:
    """Check that ``path`` is, or can become, a writable folder; leaves nothing behind.

    Call it when the command starts: an existing file in the way, or a place where nothing can
    be written, is reported (:class:`OutputError`) before the work instead of after it.
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
        raise OutputError(f"cannot create {what} {path}: {file_in_the_way(path) or probe} is a file, not a folder")
    _probe(probe, what, path)
    return path
