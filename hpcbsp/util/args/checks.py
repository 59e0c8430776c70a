"""The checks of a command line's values against the world, before any work.

Each is a usage error when it fails (the parser's one line, exit 2), so that a path that cannot
be written or a size that cannot fit is refused before the run instead of after it:

* :func:`check_outputs` (with :func:`ledger_output` for ``--ledger``) and :func:`check_out_dir`:
  output files and folders (:mod:`hpcbsp.util.outputs`: a probe file where they will go);
* :func:`check_checkpoint`: ``--checkpoint``, ``--every`` and ``--restart`` together, and the
  checkpoint folder (:func:`hpcbsp.util.args.vocabulary.add_checkpoint` adds them);
* :func:`check_memory`: a size whose arrays could not fit in this node's memory.
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Callable

from ..outputs import OutputError, file_in_the_way, prepare_dir, prepare_output, prepare_parent
from ..text import byte_size

__all__ = ["LEDGER_SUFFIXES", "check_checkpoint", "check_memory", "check_out_dir", "check_outputs", "ledger_output",
           "physical_memory"]


def check_checkpoint(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     check_target: Callable[[str], Any], errors: tuple[type[Exception], ...],
                     exists: Callable[[str], bool] | None = None) -> None:
    """The checks of :func:`.vocabulary.add_checkpoint`'s options, before any work (each a usage
    error: one line, exit 2):

    * ``--every K`` (K > 0) and ``--restart`` need ``--checkpoint``;
    * ``--checkpoint`` needs ``--every K`` (K > 0) or ``--restart``: with neither, no checkpoint
      would be written or read (``--checkpoint DIR --restart`` alone resumes from DIR and writes
      no further checkpoints);
    * a path under a regular file (``notes.txt/ck``) is refused naming the file
      (:func:`hpcbsp.util.outputs.file_in_the_way`);
    * ``check_target(path)`` (raising one of ``errors``, whose text says why) refuses a folder
      that is not this program's checkpoint, and where checkpoints will be written, the place
      must take them (its missing parent folders are made, :func:`hpcbsp.util.outputs.prepare_parent`);
    * with ``exists`` (whether a path holds a checkpoint to resume from), ``--restart`` without
      ``--every K`` is refused where DIR holds none: the run would start afresh and write
      nothing, which is never what was meant.  (With ``--every K`` it starts afresh and writes
      checkpoints there: what ``hpcbsp supervise`` relies on, ``--restart`` from the first launch.)

    Afterwards ``args.every`` is an int (0 where it was not given)."""
    every = getattr(args, "every", None)
    if not hasattr(args, "every"):  # (a program without --every)
        if args.restart and not args.checkpoint:
            parser.error("--restart needs --checkpoint DIR")
    elif (every or args.restart) and not args.checkpoint:
        parser.error("--every and --restart need --checkpoint DIR")
    elif args.checkpoint and not every and not args.restart:
        given = "with --every 0" if every == 0 else "without --every K"
        parser.error(f"--checkpoint DIR {given} would write no checkpoint: add --every K (a checkpoint "
                     "every K steps or iterations), or --restart to resume from DIR")
    if hasattr(args, "every") and every is None:
        args.every = 0
    if not args.checkpoint:
        return
    blocker = file_in_the_way(args.checkpoint)
    if blocker is not None:
        parser.error(f"--checkpoint {args.checkpoint}: {blocker} is a file, not a folder; give a checkpoint "
                     "folder whose path runs through folders only")
    try:
        check_target(args.checkpoint)
    except errors as exc:
        parser.error(str(exc))
    writes = getattr(args, "every", 1)  # (a program without --every writes by its own option)
    if args.restart and not writes and exists is not None and not exists(args.checkpoint):
        parser.error(f"--restart: there is no checkpoint in {args.checkpoint} to restart from; give the folder "
                     "that holds one, or add --every K to start afresh and write checkpoints there")
    if writes:
        try:
            prepare_parent(args.checkpoint, "--checkpoint folder")
        except OutputError as exc:
            parser.error(str(exc))


#: File name endings the ledger can be saved as (``bsp.ledger.save``).
LEDGER_SUFFIXES = (".json", ".csv")


def ledger_output(path: str | None) -> tuple[str | None, str, tuple[str, ...]]:
    """``--ledger PATH`` as an entry of :func:`check_outputs`'s list."""
    return path, "--ledger file", LEDGER_SUFFIXES


def check_outputs(parser: argparse.ArgumentParser, outputs: list[tuple[str | None, str, tuple[str, ...]]]) -> None:
    """Check output paths before any work: ``(path, what, suffixes)``; suffixes ``()``: any.

    A wrong extension, a folder where a file is wanted, or an unwritable place is a usage error
    (one line, exit 2) now, not a traceback after the run.
    """
    for path, what, suffixes in outputs:
        if not path:
            continue
        if suffixes and not path.lower().endswith(suffixes):
            endings = suffixes[0] if len(suffixes) == 1 else f"{', '.join(suffixes[:-1])} or {suffixes[-1]}"
            parser.error(f"{what} {path!r}: use a file name ending in {endings}")
        try:
            prepare_output(path, what)
        except OutputError as exc:
            parser.error(str(exc))


def check_out_dir(parser: argparse.ArgumentParser, path: str | os.PathLike[str] | None, what: str) -> None:
    """Check an output folder before any work: it may exist (as a folder) or be creatable."""
    if path is None:
        return
    try:
        prepare_dir(path, what)
    except OutputError as exc:
        parser.error(str(exc))


def physical_memory() -> int | None:
    """Bytes of physical memory on this node, or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(parser: argparse.ArgumentParser, nbytes: float, what: str, hint: str) -> None:
    """Refuse, before the work, a size whose arrays could not fit in this node's memory.

    ``nbytes`` is the estimated need on one process (``what`` describes it); ``hint`` says which
    option to make smaller.  A usage error (one line, exit 2) instead of a ``MemoryError``.
    """
    total = physical_memory()
    if total is not None and nbytes > total:
        parser.error(f"{what} needs about {byte_size(nbytes)} of memory per process, more than this "
                     f"node's {byte_size(total)}: {hint}")

