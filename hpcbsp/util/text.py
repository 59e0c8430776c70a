"""Wording for people: counted nouns, sizes in bytes, and docstrings' reStructuredText as plain text.

* :func:`plural`: ``1 rank``, ``2 ranks``, ``1,000 ranks`` (thousands separated).
* :func:`byte_size`: ``512 B``, ``4.2 MiB`` (binary units, one decimal).
* :func:`ranges`: a set of ranks (or any whole numbers) as runs, ``0-4, 7, 9-12``, or as their
  span less the gaps where that is shorter, ``0-4095 except 17``; :func:`ranks` puts
  ``rank``/``ranks`` before it.  A line about 4,096 ranks stays one short line.
* :func:`plain`: the inline markup of a docstring (Sphinx roles, literals, emphasis, links)
  removed, keeping the words a reader sees in the rendered docs: ````make run```` -> ``make run``,
  ``:mod:`hpcbsp.farm``` -> ``hpcbsp.farm``, ``:func:`~hpcbsp.run``` -> ``run``,
  ``:ref:`the guide <guide>``` -> ``the guide``, ``*Parallel Scientific Computation*`` ->
  ``Parallel Scientific Computation``, ```Perfetto <https://perfetto.dev>`_`` -> ``Perfetto``.
  Text without markup is returned unchanged (``2^m``, ``A * x``, ``a|b``).
"""
from __future__ import annotations

import re
from typing import Iterable

__all__ = ["byte_size", "plain", "plural", "ranges", "ranks"]


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 rank``, ``2 ranks`` (``plural_form`` for irregular nouns)."""
    return f"{count:,} {noun if count == 1 else (plural_form or noun + 's')}"


def byte_size(n: float) -> str:
    """``n`` bytes for people, in the largest binary unit below it: ``512 B``, ``1.5 KiB``,
    ``4.2 MiB``, ``1,536.0 EiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    """The maximal runs ``(first, last)`` of consecutive numbers of a sorted list without repeats."""
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def _spell(runs: list[tuple[int, int]]) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _numbers(runs: list[tuple[int, int]]) -> int:
    """How many numbers :func:`_spell` writes for ``runs``."""
    return sum(1 if a == b else 2 for a, b in runs)


def ranges(numbers: Iterable[int]) -> str:
    """``numbers`` (any order, repeats ignored) as runs, ``0-4, 7, 9-12``; as the span less what
    is missing, ``0-4095 except 17, 99``, where that writes fewer numbers.  The empty set is
    ``none``."""
    chosen = sorted(set(numbers))
    if not chosen:
        return "none"
    runs = _runs(chosen)
    if len(runs) > 1:
        missing = [(b + 1, a2 - 1) for (_, b), (a2, _) in zip(runs, runs[1:])]
        if 2 + _numbers(missing) < _numbers(runs):
            return f"{chosen[0]}-{chosen[-1]} except {_spell(missing)}"
    return _spell(runs)


def ranks(numbers: Iterable[int]) -> str:
    """``rank 3`` or ``ranks 0-4095 except 17`` (:func:`ranges`)."""
    chosen = set(numbers)
    return ("rank " if len(chosen) == 1 else "ranks ") + ranges(chosen)


#: ``:role:`text``` (``:py:func:`` too); ``text`` may be ``title <target>`` or ``~dotted.name``.
_ROLE = re.compile(r":(?:[\w-]+:)?[\w-]+:`([^`]+)`")
#: ````literal````.
_LITERAL = re.compile(r"``(.+?)``")
#: ```text <url>`_``, ```text`_``, ```text```: a link or the default role.
_LINK = re.compile(r"`([^`]+?)`_{0,2}")
#: ``**strong**`` and ``*emphasis*``: the star touches the word on its inside only.
_STRONG = re.compile(r"(?<![\w*])\*\*(\S(?:.*?\S)?)\*\*(?![\w*])")
_EMPHASIS = re.compile(r"(?<![\w*])\*(\S(?:.*?\S)?)\*(?![\w*])")


def _role(match: re.Match[str]) -> str:
    text = match.group(1)
    titled = re.fullmatch(r"(.+?)\s*<[^<>]+>", text)
    if titled:
        return titled.group(1)
    if text.startswith("~"):
        return text[1:].rsplit(".", 1)[-1]
    return text.lstrip("!")


def _link(match: re.Match[str]) -> str:
    text = match.group(1)
    titled = re.fullmatch(r"(.+?)\s*<[^<>]+>", text)
    return titled.group(1) if titled else text


def plain(text: str) -> str:
    """``text`` (reStructuredText, as docstrings hold it) with its inline markup removed (see the
    module docstring)."""
    literals: list[str] = []

    def keep(match: re.Match[str]) -> str:  # (a literal's text is never markup itself)
        literals.append(match.group(1))
        return f"\0{len(literals) - 1}\0"

    out = _LITERAL.sub(keep, text)
    out = _ROLE.sub(_role, out)
    out = _LINK.sub(_link, out)
    out = _STRONG.sub(r"\1", out)
    out = _EMPHASIS.sub(r"\1", out)
    return re.sub(r"\0(\d+)\0", lambda m: literals[int(m.group(1))], out)
