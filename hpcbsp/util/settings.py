"""Every ``HPCBSP_*`` environment variable: reading, checking and showing them.

Each variable is declared once, in :data:`hpcbsp.util.envvars.SETTINGS`, with its meaning, its
default, the values it allows, where it is read and (for those the Python package reads) its
parser (:mod:`.envparse`).  The readers (the runtime, the mailboxes, the farm, the parameter
server) get a value through :func:`value`; ``docs/environment.md``'s table is
:func:`markdown_table` (``tests/test_settings.py`` holds the two together).

Semantics:

* A variable that is unset, or set to blanks only, has its default.  A value is stripped of
  surrounding blanks before it is parsed; names and words are case-insensitive (``Yield`` is
  ``yield``).
* :func:`value` reads ``os.environ`` at each call (nothing is cached: a program may change a
  variable between two contexts, as ``python -m hpcbsp.bench sync`` does).
* A bad value raises :class:`SettingError`, whose text is one line: ``environment variable
  NAME='VALUE' is not ALLOWED (WHY): correct it or unset it (docs/environment.md)``.
* :func:`check` parses every ``HPCBSP_*`` variable that is set, before any work (a context's
  start, every command line's parser), and raises for the first bad one in the order of the
  names.  A name that is not declared is no error: :func:`check` returns one warning for it,
  naming the closest declared name (``HPCBSP_SYNC_TIMOUT``: did you mean
  ``HPCBSP_SYNC_TIMEOUT``?); :func:`warn` prints each such warning once per process, on
  rank 0.
* Variables that only the Slurm scripts or the test suite read are declared too (``parse`` is
  None): they are known, so never warned about, and never parsed by the package.
* :func:`shown` lists every ``HPCBSP_*`` variable set with what is wrong with it, if anything
  (invalid, with the reason; unknown, with the closest name), and never raises: ``hpcbsp info``
  shows them there instead of refusing to run.
* The words a choice allows (``HPCBSP_WAIT``, ``HPCBSP_ROUTING``, ...) are the tuples of
  :mod:`hpcbsp.util.choices`, which the code and the command lines read too.
"""
from __future__ import annotations

import difflib
import os
import sys
from typing import Any, Mapping

from .envvars import SETTINGS, Setting
from .launcher import launcher_rank

__all__ = ["DOC", "PREFIX", "SettingError", "check", "markdown_table", "shown", "value", "warn"]

#: The prefix of every variable of hpcbsp's.
PREFIX = "HPCBSP_"
#: Where the user reads about them (named in every error and warning).
DOC = "docs/environment.md"


class SettingError(ValueError):
    """A bad value in an ``HPCBSP_*`` variable; the text is the one line to show."""


# -- reading and checking --------------------------------------------------------------------

def _read(setting: Setting, raw: str) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, "is not ALLOWED (WHY)")`` for a bad ``raw``."""
    text = raw.strip()
    if not text:
        return setting.unset, None
    assert setting.parse is not None
    try:
        return setting.parse(text), None
    except ValueError as exc:
        why = str(exc)
        # (int("x") and float("x") say "invalid literal ...": the allowed values say it better)
        if why.startswith(("invalid literal", "could not convert")):
            why = ""
        return None, f"is not {_plain(setting.allowed)}" + (f" ({why})" if why else "")


def _parse(setting: Setting, raw: str) -> Any:
    value, bad = _read(setting, raw)
    if bad is not None:
        raise SettingError(f"environment variable {setting.name}={raw!r} {bad}: correct it or unset it ({DOC})")
    return value


def _plain(text: str) -> str:
    return text.replace("`", "")


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the declared variable ``name`` read by the package (its default when unset
    or blank); :class:`SettingError` for a bad one.  ``environ``: default ``os.environ``."""
    setting = SETTINGS[name]
    if not setting.python:
        raise KeyError(f"{name} is not read by the Python package")
    env = os.environ if environ is None else environ
    return _parse(setting, env.get(name, ""))


def check(environ: Mapping[str, str] | None = None) -> list[str]:
    """Parse every ``HPCBSP_*`` variable set in ``environ`` (default ``os.environ``) that the
    package reads: :class:`SettingError` for the first bad one (by name).  Returns a warning for
    each name that is not declared (the closest declared name suggested)."""
    env = os.environ if environ is None else environ
    warnings = []
    for name in sorted(n for n in env if n.startswith(PREFIX)):
        setting = SETTINGS.get(name)
        if setting is None:
            warnings.append(_unknown(name))
        elif setting.python:
            _parse(setting, env[name])
    return warnings


def shown(environ: Mapping[str, str] | None = None) -> list[tuple[str, str, str | None]]:
    """Every ``HPCBSP_*`` variable set in ``environ`` (default ``os.environ``), by name, as
    ``(name, value, problem)``: ``problem`` is None for a value hpcbsp takes (or a variable only
    the scripts or tests read), ``invalid: is not ALLOWED (WHY)`` for a bad value (with which
    every command but ``hpcbsp info`` refuses to run), ``unknown: ...`` for a name that is not
    hpcbsp's (with the closest one).  Nothing raises: ``hpcbsp info`` shows them all."""
    env = os.environ if environ is None else environ
    found: list[tuple[str, str, str | None]] = []
    for name in sorted(n for n in env if n.startswith(PREFIX)):
        setting = SETTINGS.get(name)
        problem = None
        if setting is None:
            problem = f"unknown: not a variable of hpcbsp's, ignored; {_hint(name)}"
        elif setting.python:
            bad = _read(setting, env[name])[1]
            problem = None if bad is None else f"invalid: {bad}"
        found.append((name, env[name], problem))
    return found


def _unknown(name: str) -> str:
    return f"{name} is not a variable of hpcbsp's and is ignored; {_hint(name)}"


def _hint(name: str) -> str:
    """``did you mean NAME?`` with the closest declared name, or where the known ones are."""
    # (compared without the prefix, which every name shares and which would make all look alike)
    tails = {known[len(PREFIX):]: known for known in SETTINGS}
    close = difflib.get_close_matches(name[len(PREFIX):], list(tails), n=1, cutoff=0.6)
    return f"did you mean {tails[close[0]]}?" if close else "the known ones are in " + DOC


_warned: set[str] = set()


def warn(warnings: list[str], rank: int | None = None) -> None:
    """Print each of :func:`check`'s ``warnings`` once per process, as ``[hpcbsp] warning: ...``
    on stderr, on rank 0 only (``rank``: default the launcher's)."""
    fresh = [w for w in warnings if w not in _warned]
    _warned.update(fresh)
    if fresh and (launcher_rank() if rank is None else rank) == 0:
        sys.stderr.write("".join(f"[hpcbsp] warning: {w}\n" for w in fresh))
        sys.stderr.flush()


# -- the documentation's table -----------------------------------------------------------------

def markdown_table() -> str:
    """docs/environment.md's table of every variable (tests/test_settings.py checks the docs
    hold exactly this)."""
    rows = ["| variable | default | allowed values | read by | what it does |", "|---|---|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.name}` | {s.default} | {s.allowed} | {s.read_by} | {s.meaning} |")
    return "\n".join(rows)
