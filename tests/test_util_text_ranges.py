"""``util.text.ranges``: a set of ranks as one short line, checked against brute force.

Oracle: an independent reader of the text (it expands ``a-b`` runs and ``except`` gaps back into
a set) must give the set back, and the text must write no more numbers than the shorter of the
two spellings counted by brute force (runs of the set; its span and the runs of its gaps).
"""
from __future__ import annotations

import random
import re

import pytest

from hpcbsp.util.text import ranges, ranks


def _expand(text: str) -> set[int]:
    """The numbers a ``ranges`` text names (read without the module's code)."""
    if text == "none":
        return set()

    def spans(part: str) -> set[int]:
        out: set[int] = set()
        for item in part.split(", "):
            a, _, b = item.partition("-")
            out |= set(range(int(a), int(b or a) + 1))
        return out

    kept, _, gone = text.partition(" except ")
    return spans(kept) - (spans(gone) if gone else set())


def _fewest_numbers(chosen: set[int]) -> int:
    """By brute force: the numbers the shorter spelling writes (a run of one: one number; longer: two)."""
    def count(members: set[int]) -> int:
        starts = [n for n in members if n - 1 not in members]
        return sum(1 if n + 1 not in members else 2 for n in starts)

    plain = count(chosen)
    if not chosen:
        return 0
    gaps = set(range(min(chosen), max(chosen) + 1)) - chosen
    return min(plain, 2 + count(gaps)) if gaps else plain


@pytest.mark.parametrize("seed", range(300))
def test_random_sets_read_back_and_are_short(seed):
    rng = random.Random(seed)
    size = rng.choice([1, 2, 5, 17, 64, 4096])
    density = rng.choice([0.01, 0.3, 0.5, 0.9, 0.999, 1.0])
    chosen = {r for r in range(size) if rng.random() < density}
    text = ranges(rng.sample(sorted(chosen), len(chosen)) * rng.choice([1, 2]))  # any order, repeats
    assert _expand(text) == chosen, text
    assert len(re.findall(r"\d+", text)) == _fewest_numbers(chosen), text


def test_the_forms_people_read():
    assert ranks(set(range(4096)) - {17}) == "ranks 0-4095 except 17"
    assert ranks([3]) == "rank 3" and ranks([3, 3]) == "rank 3"
    assert ranks([4, 0, 1, 2]) == "ranks 0-2, 4"
    assert ranges([1, 3, 5]) == "1, 3, 5" and ranges([]) == "none"
    assert ranges([0, 1, 2, 5, 6, 7]) == "0-2, 5-7"  # a tie keeps the plain runs
