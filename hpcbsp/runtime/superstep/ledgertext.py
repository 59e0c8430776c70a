"""The ledger's records as text: per superstep over the ranks (:func:`per_superstep`: w, sync
and h as maxima over the ranks), and the table ``bsp.ledger.summary()``, the apps and
``hpcbsp-cost ledger`` print (:func:`summarize`), with the BSP prediction w + g·h + l beside the
measured time when a machine profile is given.  Pure functions of gathered or saved records
(dicts with ``rank``, ``index``, ``label`` and the metrics of
:class:`~.ledger.SuperstepRecord`); no MPI."""
from __future__ import annotations

from typing import Any, Iterable, Protocol

from .lateness import late_lines

__all__ = ["CostModel", "per_superstep", "summarize"]


class CostModel(Protocol):
    """What :func:`summarize` needs of a machine profile (``hpcbsp.cost.profile.Profile`` is one)."""

    def superstep_cost(self, w: float, h_bytes: float, messages: float, local: bool = False) -> float:
        """Predicted seconds of a superstep with work ``w``, h-relation ``h_bytes`` (``local``:
        some rank had records, even if none moved between ranks)."""


def per_superstep(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Combine ranks: per superstep, w = max work, sync = max sync time, h = max bytes in/out."""
    steps: dict[int, dict[str, Any]] = {}
    for rec in records:
        i = int(rec["index"])
        s = steps.setdefault(i, {"index": i, "label": rec["label"], "w_s": 0.0, "sync_s": 0.0,
                                 "measured_s": 0.0, "h_bytes": 0, "h_msgs": 0, "msgs": 0, "ranks": 0,
                                 "records": 0})
        s["records"] = max(int(s["records"]), int(rec.get("records") or 0))  # (older ledgers: none)
        s["w_s"] = max(float(s["w_s"]), float(rec["work_s"]))
        s["sync_s"] = max(float(s["sync_s"]), float(rec["sync_s"]))
        s["measured_s"] = max(float(s["measured_s"]), float(rec["work_s"]) + float(rec["sync_s"]))
        for nbytes, msgs in ((rec["bytes_out"], rec["msgs_out"]), (rec["bytes_in"], rec["msgs_in"])):
            if int(nbytes) > int(s["h_bytes"]):
                s["h_bytes"], s["h_msgs"] = int(nbytes), int(msgs)
        s["msgs"] = int(s["msgs"]) + int(rec["msgs_out"])
        s["ranks"] = int(s["ranks"]) + 1
    return [steps[i] for i in sorted(steps)]


def summarize(records: list[dict[str, Any]], max_rows: int = 12,
              profile: CostModel | None = None, total: str = "total") -> str:
    """A human-readable table of the supersteps (all ranks combined) and totals (the last row,
    labelled ``total``: :mod:`.ledgersummary` says ``window`` when the records are a window's).

    With a machine ``profile`` (``hpcbsp-cost probe``), each row also shows the BSP prediction
    w + g·h + l beside the measured time (max over ranks of work + sync), and a line gives the
    model's mean and largest error.  Last, the supersteps where one rank arrived late
    (:mod:`.lateness`: the first three and how many).
    """
    steps = per_superstep(records)
    if not steps:
        return "ledger: no supersteps recorded"
    nranks = max(int(s["ranks"]) for s in steps)
    pred = [profile.superstep_cost(float(s["w_s"]), float(s["h_bytes"]), float(s["h_msgs"]),
                                   local=int(s["records"]) > 0) for s in steps] if profile is not None else None
    extra = f" {'measured':>10} {'predicted':>10}" if pred else ""
    lines = [f"ledger: {len(steps)} superstep{'s' if len(steps) != 1 else ''} on {nranks} "
             f"rank{'s' if nranks != 1 else ''}  (w, sync: max over ranks; h: max bytes in or out of one rank; "
             "times in ms; requests: puts, gets, queue sends per destination and mailbox records, "
             "summed over ranks, not MPI messages)",
             f"  {'step':>5} {'label':<18} {'w':>10} {'sync':>10} {'h [bytes]':>12} {'requests':>8}{extra}"]
    rows = list(range(len(steps))) if len(steps) <= max_rows else \
        list(range(max_rows - 2)) + [len(steps) - 2, len(steps) - 1]
    for j, i in enumerate(rows):
        s = steps[i]
        if len(steps) > max_rows and j == max_rows - 2:
            lines.append(f"  {'...':>5}")
        row = (f"  {s['index']:>5} {str(s['label'] or '')[:18]:<18} {1e3 * float(s['w_s']):>10.3f} "
               f"{1e3 * float(s['sync_s']):>10.3f} {int(s['h_bytes']):>12,} {int(s['msgs']):>8,}")
        if pred:
            row += f" {1e3 * float(s['measured_s']):>10.3f} {1e3 * pred[i]:>10.3f}"
        lines.append(row)
    tw = sum(float(s["w_s"]) for s in steps)
    ts = sum(float(s["sync_s"]) for s in steps)
    th = sum(int(s["h_bytes"]) for s in steps)
    total = f"  {total:>5} {'':<18} {1e3 * tw:>10.3f} {1e3 * ts:>10.3f} {th:>12,}"
    if pred:
        measured = [float(s["measured_s"]) for s in steps]
        total += f" {'':>8} {1e3 * sum(measured):>10.3f} {1e3 * sum(pred):>10.3f}"
        errs = [abs(p - m) / m for p, m in zip(pred, measured) if m > 0]
        lines.append(total)
        if errs:
            lines.append(f"  BSP model w + g·h + l vs measured: mean error {100 * sum(errs) / len(errs):.1f}%, "
                         f"max {100 * max(errs):.1f}%, total {100 * (sum(pred) - sum(measured)) / sum(measured):+.1f}%")
    else:
        lines.append(total)
    return "\n".join(lines + late_lines(records))
