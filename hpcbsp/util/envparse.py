"""The formats of the ``HPCBSP_*`` variables' values: one parser per format, with which
:mod:`.envvars` declares each variable.

A parser takes a variable's text, stripped of surrounding blanks and never empty (an unset or
blank variable has its default and is not parsed: :mod:`.settings`), and returns its value or
raises :class:`ValueError`.  The error's text says why where the allowed values that the
declaration shows do not say it all, and is empty otherwise (:mod:`.settings` puts it in
parentheses after them).  Words are case-insensitive (``Yield`` is ``yield``); numbers are
finite.

:func:`emulation` is also the format of the apps' ``--emulate-compute``: its errors name the
problem themselves (:func:`emulated` is the same format as a variable's parser).
"""
from __future__ import annotations

import math
from typing import Callable

from .outputs import OutputError, prepare_output

__all__ = ["choice", "emulated", "emulation", "fraction", "integer", "milliseconds_or_off", "positive_seconds",
           "seconds_at_least", "seconds_or_off", "switch", "writable_file"]


def choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    """The parser of one of :mod:`.choices`' lists (any case: ``Yield`` is ``yield``)."""
    def parse(text: str) -> str:
        word = text.lower()
        if word not in choices:
            raise ValueError("")
        return word
    return parse


def switch(text: str) -> bool:
    """``0`` or ``1``: off or on."""
    if text not in ("0", "1"):
        raise ValueError("")
    return text == "1"


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    seconds = float(text)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError("")
    return seconds


def seconds_at_least(low: float) -> Callable[[str], float]:
    """The parser of a finite number of seconds >= ``low``."""
    def parse(text: str) -> float:
        seconds = float(text)
        if not (math.isfinite(seconds) and seconds >= low):
            raise ValueError("")
        return seconds
    return parse


def seconds_or_off(text: str) -> float:
    """``0`` (off) or a finite number of seconds >= 0.1."""
    seconds = float(text)
    if not (math.isfinite(seconds) and (seconds == 0 or seconds >= 0.1)):
        raise ValueError("")
    return seconds


def milliseconds_or_off(text: str) -> float:
    """``off`` (or ``0``: 0.0) or a finite number of milliseconds > 0, returned in seconds."""
    if text.lower() == "off":
        return 0.0
    ms = float(text)
    if not (math.isfinite(ms) and ms >= 0):
        raise ValueError("")
    return ms / 1e3


def integer(low: int, high: int) -> Callable[[str], int]:
    """The parser of an integer from ``low`` to ``high``."""
    def parse(text: str) -> int:
        number = int(text)
        if not low <= number <= high:
            raise ValueError("")
        return number
    return parse


def fraction(text: str) -> float:
    """A number greater than 0 and at most 1."""
    share = float(text)
    if not (math.isfinite(share) and 0 < share <= 1):
        raise ValueError("")
    return share


_writable: set[str] = set()  # report paths already checked by this process


def writable_file(text: str) -> str:
    """A file path that can be written: its missing folders are made and a probe file is written
    there (once per process and path; :mod:`.outputs`)."""
    if text not in _writable:
        try:
            prepare_output(text, "the file")
        except OutputError as exc:
            raise ValueError(exc.reason) from None
        _writable.add(text)
    return text


def emulation(text: str) -> tuple[float | None, float | None] | None:
    """``$HPCBSP_FARM_EMULATE``'s format (also the apps' ``--emulate-compute``): ``measure`` ->
    ``(None, None)``; ``t_map=S[,t_a=S]`` -> ``(t_map, t_a or None)``; ``0``, ``off``, ``no`` ->
    None (no emulation).  Seconds are finite and >= 0.  ValueError names the problem."""
    text = text.strip()
    if text.lower() in ("0", "off", "no"):
        return None
    if text.lower() == "measure":
        return None, None
    expected = f"emulated compute {text!r}: expected 'measure' or 't_map=SECONDS[,t_a=SECONDS]'"
    fields: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, number = part.partition("=")
        key = key.strip()
        if not sep or key not in ("t_map", "t_a"):
            raise ValueError(expected)
        try:
            fields[key] = float(number)
        except ValueError:
            raise ValueError(f"emulated compute {text!r}: {key} is not a number of seconds") from None
        if not (math.isfinite(fields[key]) and fields[key] >= 0):
            raise ValueError(f"emulated compute {text!r}: {key} must be a finite number of seconds >= 0")
    if "t_map" not in fields:
        raise ValueError(expected)
    return fields["t_map"], fields.get("t_a")


def emulated(text: str) -> tuple[float | None, float | None] | None:
    """:func:`emulation` as a variable's parser (the allowed values say it all)."""
    try:
        return emulation(text)
    except ValueError:
        raise ValueError("") from None
