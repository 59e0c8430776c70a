"""Wording for people: counted nouns, and docstrings' reStructuredText as plain text.

* :func:`plural`: ``1 rank``, ``2 ranks``, ``1,000 ranks`` (thousands separated).
* :func:`plain`: the inline markup of a docstring (Sphinx roles, literals, emphasis, links)
  removed, keeping the words a reader sees in the rendered docs: ````make run```` -> ``make run``,
  ``:mod:`hpcbsp.farm``` -> ``hpcbsp.farm``, ``:func:`~hpcbsp.run``` -> ``run``,
  ``:ref:`the guide <guide>``` -> ``the guide``, ``*Parallel Scientific Computation*`` ->
  ``Parallel Scientific Computation``, ```Perfetto <https://perfetto.dev>`_`` -> ``Perfetto``.
  Text without markup is returned unchanged (``2^m``, ``A * x``, ``a|b``).
"""
from __future__ import annotations

import re

__all__ = ["plain", "plural"]


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 rank``, ``2 ranks`` (``plural_form`` for irregular nouns)."""
    return f"{count:,} {noun if count == 1 else (plural_form or noun + 's')}"


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
