"""Progress lines on stderr for long runs: one small helper every command uses.

A run that takes longer than about two seconds says how far it is, on stderr (so that stdout
stays the result), at most every ``every_s`` seconds; a short run prints nothing.  ``--quiet``
turns it off (``enabled=False``), and under MPI only one rank (the caller passes
``enabled=rank == 0``) prints.  Where the lines go to stderr (no ``stream`` given) they are
written only when stderr is a terminal, so that a log file or a pipe keeps just the results,
unless ``$HPCBSP_PROGRESS`` says otherwise: ``1`` writes them wherever stderr goes (``hpcbsp
supervise`` sets it for its job, whose last progress line tells it how far the job got), ``0``
never (:func:`wanted`).  A rank under an MPI launcher cannot tell (the launcher hands it a pipe
whether or not its own stderr is a terminal) and writes them; a command that starts MPI jobs
itself passes its own answer down (:func:`child_env`).  A ``stream`` given is written unless
``$HPCBSP_PROGRESS=0``.

Why this helper and not tqdm or rich: no new dependency for an MPI package installed on
clusters, and one plain line format that :func:`parse` reads back (``hpcbsp supervise`` learns
from a job's last line how many steps a restart loses); a redrawn bar (``\r``, terminal
control codes) would be neither a log line nor parseable.

    show = Progress("heat", total=steps, enabled=not args.quiet and bsp.pid == 0)
    for step in range(steps):
        ...
        show(step + 1)
    show.note("checkpoint written to ck/ at step 200")

:func:`parse` reads such a line back (``hpcbsp supervise`` learns from it how far a job got).
"""
from __future__ import annotations

import re
import sys
import time
from typing import NamedTuple, TextIO

from .launcher import launcher_name
from .settings import SettingError, value

#: The variable that turns progress lines on (``1``) or off (``0``) wherever stderr goes.
PROGRESS_ENV = "HPCBSP_PROGRESS"


def wanted(stream: TextIO | None = None) -> bool:
    """Whether progress lines are written: ``$HPCBSP_PROGRESS`` when it is ``0`` or ``1``, else
    to a ``stream`` given always, and to stderr when it is a terminal or under an MPI launcher."""
    try:
        forced = value(PROGRESS_ENV)
    except SettingError:  # refused in one line by the command's own check before any work
        forced = None
    if forced is not None:
        return bool(forced)
    if stream is not None or launcher_name() != "singleton":
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stderr
        return False


def child_env() -> dict[str, str]:
    """``$HPCBSP_PROGRESS`` for the jobs a command starts, its own answer of :func:`wanted`: the
    ranks' stderr is a pipe to the launcher, so they cannot tell whether anyone reads it."""
    return {PROGRESS_ENV: "1" if wanted() else "0"}


class Progress:
    """Rate-limited progress lines ``[label] 120/1,000 (12%, 2.0 s elapsed, ~14.7 s left)``.

    Parameters
    ----------
    label : str
        What is running (printed in brackets).
    total : int, float or None
        The number of units the run will do (a float for a continuous quantity such as
        simulated time), or None when unknown (no percentage then).
    enabled : bool
        False (``--quiet``, or a rank other than 0) prints nothing; True prints where
        :func:`wanted` says (a terminal, a stream given, or ``$HPCBSP_PROGRESS=1``).
    every_s : float
        Least seconds between two lines; the first comes after ``every_s`` too, so runs shorter
        than that stay silent.
    unit : str
        The name of the units counted (``step``, ``iteration``, ...).
    stream : file, optional
        Where the lines go (default: ``sys.stderr`` at the time of the call).
    limit : bool
        ``total`` is only an upper bound (an iteration limit that a converging run may never
        reach): no percentage and no time left, just ``of at most``.
    """

    def __init__(self, label: str, total: float | None = None, *, enabled: bool = True, every_s: float = 2.0,
                 unit: str = "", stream: TextIO | None = None, limit: bool = False):
        self.label = label
        self.total = total
        self.limit = limit
        self.enabled = enabled and wanted(stream)
        self.every_s = every_s
        self.unit = unit
        self._stream = stream
        self._t0 = time.perf_counter()
        self._last = self._t0

    @property
    def elapsed(self) -> float:
        """Seconds since the helper was made."""
        return time.perf_counter() - self._t0

    def _write(self, text: str) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        try:
            stream.write(f"[{self.label}] {text}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not end the run
            self.enabled = False

    def __call__(self, done: float, detail: str = "") -> None:
        """Report ``done`` units (printed only if ``every_s`` has passed since the last line)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < self.every_s:
            return
        self._last = now
        elapsed = now - self._t0
        unit = f"{self.unit} " if self.unit else ""
        if self.total and self.limit:
            text = f"{unit}{_fmt(done)} (of at most {_fmt(self.total)}; {elapsed:.1f} s elapsed)"
        elif self.total:
            left = elapsed * (self.total - done) / done if done > 0 else None
            text = (f"{unit}{_fmt(done)}/{_fmt(self.total)} ({100.0 * done / self.total:.0f}%, "
                    f"{elapsed:.1f} s elapsed" + (f", ~{left:.1f} s left)" if left is not None else ")"))
        else:
            text = f"{unit}{_fmt(done)} ({elapsed:.1f} s elapsed)"
        self._write(text + (f"; {detail}" if detail else ""))

    def note(self, text: str) -> None:
        """Print ``text`` now (an event such as a checkpoint written), unless disabled."""
        if self.enabled:
            self._write(text)


def _fmt(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


class Reported(NamedTuple):
    """What a progress line says: :func:`parse`'s result."""

    label: str
    unit: str    #: "" when the line names none
    done: float
    total: float | None


#: A line of :meth:`Progress.__call__`: ``[label] [unit ]done[/total] (... s elapsed ...)``.
_LINE = re.compile(r"\[([^\]]+)\] (?:([A-Za-z][\w-]*) )?([\d,]+(?:\.\d+)?)(?:/([\d,]+(?:\.\d+)?))? "
                   r"\((?:of at most [\d,.]+; )?[^)]*?\d s elapsed")


def parse(line: str) -> Reported | None:
    """The count a progress line reports, or None for any other line (notes included)."""
    m = _LINE.match(line.strip())
    if m is None:
        return None
    number = lambda text: float(text.replace(",", ""))  # noqa: E731
    return Reported(m.group(1), m.group(2) or "", number(m.group(3)),
                    number(m.group(4)) if m.group(4) else None)
