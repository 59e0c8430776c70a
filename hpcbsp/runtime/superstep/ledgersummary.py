"""The apps' ledger summary: the window's table of all ranks, and the totals of every superstep.

A ledger keeps its last ``$HPCBSP_LEDGER_WINDOW`` rows whole and running aggregates over all of
them (:mod:`.ledger`).  :func:`gather_summary` (collective) brings both to one rank: each rank's
window rows (at most ``window`` per rank, as ``ledger.gather``) and each rank's
:class:`~.ledger.Aggregates` (O(1) per rank: a count, a total and a maximum per metric, and the
same per label).  :meth:`LedgerSummary.text` is the table of :func:`~.ledgertext.summarize`; where
older supersteps have left some rank's window, its last row is labelled ``window`` instead of
``total`` and a line gives every superstep's figures from the aggregates:

- ``w`` and ``sync``: the largest total over ranks (a lower bound of the table's sum over
  supersteps of the max over ranks, equal to it where one rank is the slowest in every one);
- bytes and requests between ranks: summed over ranks (``bytes_out``, ``msgs_out``), exact;
- the largest h-relation: the maximum over ranks of each rank's largest ``bytes_out`` or
  ``bytes_in`` in one superstep, exactly the largest h of any superstep.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .ledger import Aggregates, Ledger
from .ledgertext import CostModel, summarize


@dataclass(frozen=True)
class LedgerSummary:
    """What rank 0 knows of every rank's ledger after :func:`gather_summary`."""

    records: list[dict[str, Any]]   #: the rows of every rank's window, with a ``rank`` field
    ranks: list[Aggregates]         #: each rank's aggregates over all of its supersteps

    @property
    def count(self) -> int:
        """Supersteps recorded (the most of any rank)."""
        return max((a.count for a in self.ranks), default=0)

    @property
    def windowed(self) -> bool:
        """Whether some rank's older rows have left its window (``records`` is then a tail)."""
        shown = [0] * len(self.ranks)
        for rec in self.records:
            shown[int(rec["rank"])] += 1
        return any(a.count > n for a, n in zip(self.ranks, shown))

    def totals(self) -> dict[str, float]:
        """Every superstep of every rank: ``work_s``, ``sync_s`` (largest rank total),
        ``bytes``, ``requests`` (summed over ranks) and ``h_max`` (largest h-relation)."""
        ranks = self.ranks
        return {"work_s": max((a.totals["work_s"] for a in ranks), default=0.0),
                "sync_s": max((a.totals["sync_s"] for a in ranks), default=0.0),
                "bytes": sum(int(a.totals["bytes_out"]) for a in ranks),
                "requests": sum(int(a.totals["msgs_out"]) for a in ranks),
                "h_max": max((max(int(a.maxima["bytes_out"]), int(a.maxima["bytes_in"])) for a in ranks), default=0)}

    def text(self, profile: CostModel | None = None, max_rows: int = 12) -> str:
        """The table (:func:`~.ledgertext.summarize`) and, for a window, the line of all supersteps."""
        if not self.windowed:
            return summarize(self.records, max_rows=max_rows, profile=profile)
        table = summarize(self.records, max_rows=max_rows, profile=profile, total="window")
        shown = len({int(rec["index"]) for rec in self.records})
        t = self.totals()
        return (f"{table}\n  (the table holds the last {shown:,} of {self.count:,} supersteps: "
                "$HPCBSP_LEDGER_WINDOW; --ledger PATH saves them all)\n"
                f"  all {self.count:,} supersteps: w {1e3 * t['work_s']:.3f} ms, sync {1e3 * t['sync_s']:.3f} ms "
                f"(the largest rank total), {t['bytes']:,} bytes and {t['requests']:,} requests between ranks, "
                f"largest h {t['h_max']:,} bytes")


def gather_summary(ledger: Ledger, root: int | None = 0) -> LedgerSummary | None:
    """Collective: every rank's window rows and aggregates, on ``root`` (every rank if None);
    None elsewhere."""
    records = ledger.gather(root=root)
    ranks = ledger.gather_aggregates(root=root)
    if records is None or ranks is None:
        return None
    return LedgerSummary(records, ranks)
