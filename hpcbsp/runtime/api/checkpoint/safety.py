"""Where a checkpoint may be written, and how a new one replaces the last without losing it.

A save at ``PATH`` uses three directories: ``PATH`` (the checkpoint), ``PATH.tmp`` (the one being
written) and ``PATH.old`` (the previous one, during the swap).  Nothing that hpcbsp did not write
is replaced or removed: each of the three must be absent, an empty directory, or a directory that
carries the marker (or, from hpcbsp before the marker, a ``meta.json`` of this format) and holds
only a checkpoint's files (:mod:`.format`).  Anything else (a file, a folder of the user's, a
checkpoint with files of the user's added, a symbolic link) is refused, and so is a checkpoint of
another program at ``PATH``.  :func:`check_target` makes the check, for command lines that want to
refuse a bad path before the work starts and for a save on rank 0 before it writes anything;
:func:`remove_own` makes it again before it deletes.  The check lists each directory once and
takes its entries' kinds from the listing (no call per file), so what it costs on every rank of a
command line does not grow with the number of files a checkpoint has.

The swap (:func:`swap`): ``PATH`` -> ``PATH.old``, ``PATH.tmp`` -> ``PATH``, remove ``PATH.old``.
A crash or a kill at any point leaves the previous checkpoint readable (a restore reads
``PATH.old`` where ``PATH`` is missing, :func:`.format.read_meta`).  Everything here is local to
one process and never raises for what it finds but :class:`BSPError` (:func:`check_target`) or
OSError (the functions that change the disk).
"""
from __future__ import annotations

import os

from ...errors import BSPError
from .format import MARKER, OWN_FILE, meta_program, write_marker


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds an hpcbsp checkpoint to resume from (also one whose save was
    interrupted between its two renames, which a restore reads from ``PATH.old``).

    An empty directory or one that hpcbsp did not write is no checkpoint (a save there is
    refused, see :func:`check_target`).
    """
    path = os.fspath(path)
    return _is_own(path) or (not os.path.lexists(path) and _is_own(path + ".old"))


def check_target(path: str | os.PathLike[str], program: str | None = None) -> None:
    """Raise :class:`BSPError` (one line) if a checkpoint may not be written at ``path``.

    ``PATH``, ``PATH.tmp`` and ``PATH.old`` must each be absent, an empty directory, or hpcbsp's
    own (see the module docstring); with ``program``, a checkpoint at ``PATH`` must be of that
    program.  Local and read-only: a command line calls it before the work starts, and
    :meth:`BSP.checkpoint <hpcbsp.runtime.api.context.BSP.checkpoint>` on rank 0 before every save.
    """
    why = why_not(os.path.abspath(os.fspath(path)), program)
    if why:
        raise BSPError(why)


def why_not(path: str, program: str | None) -> str | None:
    """Why a checkpoint may not be written at ``path`` (None: it may)."""
    for target in (path, path + ".tmp", path + ".old"):
        why = _foreign(target)
        if why:
            return (f"{why}; hpcbsp writes a checkpoint only where there is none or its own: "
                    f"choose another checkpoint path, or move {target} away")
    if program is not None:
        source = path if os.path.isdir(path) else path + ".old"
        theirs = meta_program(source)
        if theirs is not None and theirs != program:
            return (f"{source} holds a checkpoint of program {theirs!r}, not of {program!r}: "
                    "choose another checkpoint path, or remove it if it is no longer needed")
    return None


def stage(tmp: str) -> None:
    """Make ``tmp`` a new, empty directory that carries the marker from the start (removing what
    an interrupted save left there).  Raises OSError."""
    remove_own(tmp)  # left by an interrupted save
    os.makedirs(tmp)
    write_marker(tmp)


def swap(path: str, tmp: str) -> None:
    """Put the complete checkpoint ``tmp`` in place of the one at ``path``, which stays readable
    at every moment (see the module docstring).  Raises OSError."""
    old = path + ".old"
    if os.path.lexists(path):
        remove_own(old)  # a leftover of ours: PATH is the newer checkpoint
        os.rename(path, old)
        os.rename(tmp, path)
    else:  # none yet, or PATH.old is the last one (an interrupted swap): keep it
        os.rename(tmp, path)  # until the new one is in place
    remove_own(old)


def remove_own(path: str) -> None:
    """Remove ``path`` if it is absent, empty or hpcbsp's own (checked again here); else raise
    OSError.  Only the files a checkpoint consists of are deleted, the marker last."""
    if not os.path.lexists(path):
        return
    why = _foreign(path)
    if why:
        raise OSError(why)
    names = os.listdir(path)
    for name in sorted(names, key=lambda n: n == MARKER):
        os.remove(os.path.join(path, name))
    os.rmdir(path)


def _foreign(path: str) -> str | None:
    """Why ``path`` is not something a save may replace or remove (None: it may)."""
    if not os.path.lexists(path):
        return None
    if os.path.islink(path):
        return f"{path} is a symbolic link, not an hpcbsp checkpoint"
    if not os.path.isdir(path):
        return f"{path} exists and is not an hpcbsp checkpoint (it is a file)"
    try:
        with os.scandir(path) as listing:  # the entries' kinds come with the listing: no stat each
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    if not entries:
        return None
    names = [e.name for e in entries]
    if MARKER not in names and meta_program(path) is None:
        return f"{path} exists and is not an hpcbsp checkpoint (it holds {_some(names)})"
    others = [e.name for e in entries if not OWN_FILE.fullmatch(e.name) or not e.is_file(follow_symlinks=False)]
    if others:
        return f"{path} is an hpcbsp checkpoint but also holds what hpcbsp did not write ({_some(others)})"
    return None


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _is_own(path: str) -> bool:
    """Whether ``path`` is a directory that hpcbsp wrote (its marker, or an older checkpoint's
    ``meta.json``)."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    return os.path.isfile(os.path.join(path, MARKER)) or meta_program(path) is not None
