"""Worker-count lists on the command line: ``1,2,4,...,100000``, ``1-16``, ``1,3,5,...,21``."""
from __future__ import annotations

from ..util.args.types import exact_integer
from .errors import CostInputError

#: Longest list a pattern may expand to (a typo like ``1,2,...,1e9`` should fail, not hang).
MAX_ENTRIES = 2_000_000
#: The largest worker count: K workers and the master are K + 1 MPI ranks, an MPI ``int``.
MAX_WORKERS = 2**31 - 2


def parse_workers(text: str) -> list[int]:
    """Expand a worker-count list (:class:`CostInputError`, one line naming the bad entry, for
    anything but whole numbers from 1 to :data:`MAX_WORKERS`).

    ``a,b,c`` lists values; ``a-b`` is the inclusive range; ``x,y,...,z`` continues the
    progression of the values before ``...`` up to and including ``z``: geometric when the last
    three have a constant integer ratio > 1 (``1,2,4,...``), else arithmetic with the last step
    (``1,2,...`` counts one by one).

    Examples
    --------
    >>> parse_workers("1,2,4,...,64")
    [1, 2, 4, 8, 16, 32, 64]
    >>> parse_workers("1-4,10")
    [1, 2, 3, 4, 10]
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise CostInputError(f"empty worker list {text!r}")
    out: list[int] = []
    i = 0
    while i < len(parts):
        part = parts[i]
        if part in ("...", "…"):
            if i + 1 >= len(parts) or len(out) < 2:
                raise CostInputError(f"'...' in {text!r} needs two values before it and one after")
            out.extend(_continue(out, _int(parts[i + 1], text), text))
            i += 2
            continue
        if "-" in part[1:]:
            lo_text, hi_text = part[0] + part[1:].split("-", 1)[0], part[1:].split("-", 1)[1]
            lo, hi = _int(lo_text, text), _int(hi_text, text)
            if hi < lo:
                raise CostInputError(f"range {part!r} in {text!r} runs backwards")
            if hi - lo > MAX_ENTRIES:
                raise CostInputError(f"range {part!r} is too long")
            out.extend(range(lo, hi + 1))
        else:
            out.append(_int(part, text))
        i += 1
    if min(out) < 1:
        raise CostInputError(f"worker counts must be >= 1 in {text!r}")
    return sorted(set(out))


def _int(text: str, whole: str) -> int:
    """One worker count, exactly (``1e3`` is 1000; ``2.5`` and ``1e30`` are refused, never rounded)."""
    try:
        value = exact_integer(text, MAX_WORKERS)
    except OverflowError:
        raise CostInputError(f"worker count {text!r} in {whole!r} is too large: at most {MAX_WORKERS:,} (K workers "
                             "and the master are K + 1 MPI ranks, and MPI counts ranks in a C int)") from None
    if value is None:
        try:
            float(text if text.isascii() else "?")
        except ValueError:
            raise CostInputError(f"not a worker count: {text!r} in {whole!r}") from None
        raise CostInputError(f"worker counts are integers, got {text!r} in {whole!r}")
    return value


def _continue(seen: list[int], end: int, whole: str) -> list[int]:
    a, b = seen[-2], seen[-1]
    geometric = len(seen) >= 3 and a > 0 and b % a == 0 and b // a > 1 and seen[-3] * (b // a) == a
    if geometric:
        ratio = b // a
        out, v = [], b * ratio
        while v <= end:
            out.append(v)
            v *= ratio
    elif b > a:
        step = b - a
        if (end - b) // step > MAX_ENTRIES:
            raise CostInputError(f"{whole!r} expands to too many values")
        out = list(range(b + step, end + 1, step))
    else:
        raise CostInputError(f"cannot continue {a},{b},... in {whole!r}: values must increase")
    if not out or out[-1] != end:
        out.append(end)  # the end value is always included, even off the progression
    return out
