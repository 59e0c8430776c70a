"""The argparse types of every hpcbsp command line: text -> checked value, or one line saying why not.

Semantics (each raises :class:`argparse.ArgumentTypeError`, whose text argparse puts after
``argument --OPTION:``; it names the value given):

* Numbers are ASCII (other scripts' digits are refused), may carry ``_`` separators
  (``1_000``) and surrounding blanks, and must be finite (``nan``, ``inf`` refused).
* An integer may be written with an exponent or a fraction that makes it whole (``1e6``,
  ``1.5e3``): it is converted exactly (decimal arithmetic, never through a float, so ``1e30`` is
  10**30 and then refused as out of range, not a rounded 1000000000000000019884624838656), and
  must fit in an int64, which is how the programs keep counts, sizes and seeds.
* :func:`positive_int` (>= 1), :func:`nonnegative_int` (>= 0), :func:`seed` ([0, 2**63)),
  :func:`positive_float` (> 0), :func:`nonnegative_float` (>= 0), :func:`finite_float`,
  :func:`zipf_exponent` (> 1, or 0), :func:`seconds` (>= 0), :func:`positive_seconds` (> 0),
  :func:`fraction` ([0, 1]).
"""
from __future__ import annotations

import argparse
import math
from decimal import Decimal, InvalidOperation

__all__ = ["exact_integer", "finite_float", "fraction", "integer", "nonnegative_float", "nonnegative_int",
           "positive_float", "positive_int", "positive_seconds", "seconds", "seed", "zipf_exponent"]

#: The int64 range the programs keep integers in.
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def _clean(text: str) -> str:
    return text.strip().replace("_", "")


def _number(text: str, kind: str) -> float:
    """``text`` as a finite float; ``1_000`` and ``1e6`` accepted, other scripts' digits not."""
    clean = _clean(text)
    try:
        if not clean.isascii():
            raise ValueError(text)
        value = float(clean)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind} (a finite value is needed)")
    return value


def exact_integer(text: str, limit: int) -> int | None:
    """``text`` (ASCII; ``_`` separators, an exponent or a fraction that makes it whole) as the
    exact integer it writes, or None where it writes no finite whole number.  A magnitude above
    ``limit`` raises :class:`OverflowError` (checked before the integer is built, so ``1e999999``
    costs nothing)."""
    clean = _clean(text)
    if not clean.isascii():
        return None
    if clean.lstrip("+-").isdigit():
        value = int(clean)
    else:
        try:
            number = Decimal(clean)
        except InvalidOperation:
            return None
        if not number.is_finite() or number != number.to_integral_value():
            return None
        if number.adjusted() > len(str(limit)):  # (far beyond the limit: never build it)
            raise OverflowError(text)
        value = int(number)
    if abs(value) > limit:
        raise OverflowError(text)
    return value


def integer(text: str) -> int:
    """argparse type: an integer that fits in int64 (``1e6`` and ``1_000_000`` accepted; ``2.5`` is
    not): the programs keep counts, sizes and seeds in int64 arrays."""
    out_of_range = f"{text!r} is out of range (an int64: from -2**63 to 2**63 - 1)"
    try:
        value = exact_integer(text, 2**63)
    except OverflowError:
        raise argparse.ArgumentTypeError(out_of_range) from None
    if value is None:
        _number(text, "an integer")  # (says why: not a number, or not a finite one)
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if not INT64_MIN <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(out_of_range)
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = integer(text)
    except argparse.ArgumentTypeError as exc:
        if "out of range" in str(exc):
            raise
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer (it must be >= 1)")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def seed(text: str) -> int:
    """argparse type: a random seed, an integer in [0, 2**63) (numpy's generators take no negative
    seed, and programs record their seed as an int64)."""
    try:
        value = integer(text)
    except argparse.ArgumentTypeError:
        value = -1
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed (an integer from 0 to 2**63 - 1)")
    return value


def _not_negative(text: str, kind: str, refusal: str, zero: bool = True) -> float:
    """``text`` as a finite number (``kind``: what it must be, as :func:`_number` names it) that
    is >= 0, or > 0 where not ``zero``; ``refusal`` (with ``{text!r}`` in it) says why not."""
    value = _number(text, kind)
    if value < 0 or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(refusal.format(text=text))
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _not_negative(text, "a number", "{text!r} must be > 0", zero=False)


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _not_negative(text, "a number", "{text!r} must be >= 0")


def finite_float(text: str) -> float:
    """argparse type: any finite number."""
    return _number(text, "a number")


def zipf_exponent(text: str) -> float:
    """argparse type: a Zipf exponent S > 1, or 0 for uniform keys."""
    value = _number(text, "a number")
    if value != 0 and value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 1 (a Zipf exponent), or 0 for uniform keys")
    return value


def seconds(text: str) -> float:
    """argparse type: a finite duration in seconds, >= 0 (fractions kept: ``0.5`` is half a second)."""
    return _not_negative(text, "a number of seconds", "a time must be a finite number >= 0, got {text!r}")


def positive_seconds(text: str) -> float:
    """argparse type: a finite duration in seconds, > 0."""
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a time must be > 0 seconds, got {text!r}")
    return value


def fraction(text: str) -> float:
    """argparse type: a probability in [0, 1]."""
    value = _number(text, "a number")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must lie in [0, 1]")
    return value
