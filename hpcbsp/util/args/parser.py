"""The parser every hpcbsp command line is built on, and how a command line ends.

* :class:`OneLineParser` reports a usage error as one line naming the program, on stderr, and
  exits 2; it never accepts an abbreviated option (``--n`` must not silently mean
  ``--no-check``).  Once the arguments are parsed it checks the ``HPCBSP_*`` environment
  variables (:func:`settings_ok`): a bad value is one line and exit 2 before any work, an unknown
  name a warning.  ``OneLineParser(check_settings=False)`` leaves that to the command
  (``hpcbsp info`` shows a bad value among the settings instead of refusing to run).
* A reader that closed its end of stdout (``hpcbsp --help | head -3``) ends a command quietly
  with status 141, as SIGPIPE ends ``cat`` (128 + 13), instead of with a ``BrokenPipeError``
  traceback: in :class:`OneLineParser`'s ``--help`` and usage, and in a command's ``main`` run
  through :func:`quiet_pipe` (``hpcbsp``, ``hpcbsp-cost``, ``python -m hpcbsp.bench``).
* :func:`not_a_program` is what ``python -m`` of a library module says.
"""
from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import Any, Callable, NoReturn

from .. import settings
from ..launcher import launcher_rank

__all__ = ["CLOSED_STDOUT_STATUS", "OneLineParser", "closed_stdout", "not_a_program", "quiet_pipe", "settings_ok"]

#: Exit status of a command whose stdout was closed by its reader (128 + SIGPIPE, as a shell shows
#: a program that SIGPIPE ended).
CLOSED_STDOUT_STATUS = 128 + signal.SIGPIPE


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line naming the program, and exits 2.

    Abbreviated long options are refused (``allow_abbrev=False``).  Under mpiexec every rank
    parses the same arguments; only rank 0 prints the error, so the user sees it once.  With
    ``check_settings`` (the default) :meth:`parse_args` then checks the ``HPCBSP_*`` variables
    (:func:`settings_ok`; exit 2 if one is bad).
    """

    def __init__(self, *args: Any, check_settings: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.check_settings = check_settings

    def _print_message(self, message: str, file: Any = None) -> None:
        """argparse's (``--help``, usage, ``--version``), but a closed stdout ends the command
        quietly with :data:`CLOSED_STDOUT_STATUS` (argparse's own would ignore the failure and go
        on to exit 0)."""
        if not message:
            return
        file = file or sys.stderr
        try:
            file.write(message)
            file.flush()
        except OSError as exc:
            if file is sys.stdout and closed_stdout(exc):
                _drop_stdout()
                sys.exit(CLOSED_STDOUT_STATUS)
        except AttributeError:  # (no stream at all, as argparse allows)
            pass

    def error(self, message: str) -> NoReturn:
        if launcher_rank() == 0:
            sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        """argparse's, then the check of the environment (:func:`settings_ok`; exit 2 if bad)."""
        namespace = super().parse_args(*args, **kwargs)
        if self.check_settings and not settings_ok():
            sys.exit(2)
        return namespace


def settings_ok() -> bool:
    """Check every ``HPCBSP_*`` variable set (:func:`hpcbsp.util.settings.check`), as a command
    does before its work: False after one line ``[hpcbsp] error: ...`` for a bad value (rank 0
    prints it; every rank returns False, and the command exits 2); a warning for each name that
    is not hpcbsp's."""
    try:
        warnings = settings.check()
    except settings.SettingError as exc:
        if launcher_rank() == 0:
            sys.stderr.write(f"[hpcbsp] error: {exc}\n")
            sys.stderr.flush()
        return False
    settings.warn(warnings)
    return True


def closed_stdout(exc: BaseException) -> bool:
    """Whether ``exc`` says that stdout's reader has gone (``BrokenPipeError``, ``EPIPE``)."""
    return isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE)


def _drop_stdout() -> None:
    """Point stdout at ``/dev/null``: what is still buffered for it goes nowhere, and Python's
    own flush at exit cannot fail a second time (with an ``Exception ignored`` message)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def quiet_pipe(main: Callable[[], int]) -> int:
    """``main()``'s exit status, except that a closed stdout (its reader has gone: ``| head``)
    ends it with :data:`CLOSED_STDOUT_STATUS` and nothing on stderr; stdout is flushed before
    it returns, so that the failure cannot come later, at the interpreter's exit."""
    try:
        status = main()
        sys.stdout.flush()
    except BaseException as exc:
        if not closed_stdout(exc):
            raise
        _drop_stdout()
        return CLOSED_STDOUT_STATUS
    return status


def not_a_program(module: str, instead: str) -> int:
    """For ``python -m`` of a library module: one line saying what to run instead; status 2."""
    sys.stderr.write(f"{module} is a library module, not a program: {instead}\n")
    return 2
