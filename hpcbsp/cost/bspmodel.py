"""The BSP cost w + g·h + l per superstep of a recorded run, beside the measured time.

Input: a ledger (``bsp.ledger.save(path)`` on every rank, or the records of
``bsp.ledger.gather()``) and a machine profile (``hpcbsp-cost probe``).  Per superstep, over
ranks: w = max ``work_s``, h = max of ``bytes_out``/``bytes_in``, the measured time is
max ``work_s + sync_s``.  g and l come from the profile's regime nearest the superstep's mean
message size (h / messages of the rank that has the h); a superstep that moves nothing costs
w + l_empty when no rank had a record (the runtime then skips the exchange and only runs its
control step), and w + l_local when some rank had records for itself only (``records`` in the
ledger: the exchange runs there, without messages; regime "local").
"""
from __future__ import annotations

import csv
import os
from typing import Any, Iterable, Mapping

import numpy as np

from ..runtime.superstep.ledgertext import per_superstep
from .errors import CostInputError
from .modelfile import load_json
from .profile import Profile

LEDGER_FIELDS = ("rank", "index", "work_s", "sync_s", "bytes_out", "bytes_in", "msgs_out", "msgs_in")


def load_ledger(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a ledger saved as ``.json`` or ``.csv``; every problem is one :class:`CostInputError` line."""
    return read_ledger(path)[0]


def read_ledger(path: str | os.PathLike) -> tuple[list[dict[str, Any]], list[list[int]] | None]:
    """:func:`load_ledger`'s records and, from a ``.json`` that has it, ``"bytes_to"``: the payload
    bytes each rank sent to each rank over the run (a p x p matrix; None when absent)."""
    source = os.fspath(path)
    matrix = None
    if source.endswith(".trace.json"):
        raise CostInputError(f"{source} is a trace for viewing; save the ledger as .json or .csv for the cost model")
    if source.endswith(".json"):
        data = load_json(source, "ledger")
        if not isinstance(data, dict) or not isinstance(data.get("records"), list):
            raise CostInputError(f"{source}: not a ledger (expected {{\"nprocs\": P, \"records\": [...]}})")
        records = data["records"]
        matrix = data.get("bytes_to")
        if matrix is not None and not (isinstance(matrix, list) and all(
                isinstance(row, list) and all(isinstance(v, int) and v >= 0 for v in row) for row in matrix)):
            raise CostInputError(f"{source}: \"bytes_to\" is not a matrix of byte counts")
    elif source.endswith(".csv"):
        try:
            with open(source, newline="") as fh:
                records = list(csv.DictReader(fh))
        except OSError as exc:
            raise CostInputError(f"cannot read ledger {source}: {exc.strerror or exc}") from None
    else:
        raise CostInputError(f"ledger {source}: use a .json or .csv file written by bsp.ledger.save")
    return check_records(records, source), matrix


def check_records(records: Iterable[Mapping[str, Any]], source: str = "<memory>") -> list[dict[str, Any]]:
    """Ledger records with numeric fields converted and checked."""
    out = []
    for n, rec in enumerate(records, 1):
        try:
            row: dict[str, Any] = {k: (float(rec[k]) if k.endswith("_s") else int(float(rec[k]))) for k in LEDGER_FIELDS}
        except KeyError as exc:
            raise CostInputError(f"{source}: record {n} lacks {exc.args[0]!r}") from None
        except (TypeError, ValueError):
            raise CostInputError(f"{source}: record {n} has a non-numeric field") from None
        if row["work_s"] < 0 or row["sync_s"] < 0:
            raise CostInputError(f"{source}: record {n} has a negative time")
        row["label"] = rec.get("label") or None
        try:  # optional: ledgers written before it existed have none
            row["records"] = int(float(rec.get("records") or 0))
        except (TypeError, ValueError):
            raise CostInputError(f"{source}: record {n} has a non-numeric field") from None
        out.append(row)
    if not out:
        raise CostInputError(f"{source}: the ledger has no records")
    return out


def compare(records: list[dict[str, Any]], profile: Profile) -> dict[str, Any]:
    """Predicted w + g·h + l beside the measured time for every superstep, and a summary.

    Returns
    -------
    dict
        ``{"supersteps": [{"index", "label", "w_s", "h_bytes", "regime", "predicted_s", "measured_s",
        "error_pct"}], "summary": {"supersteps", "measured_total_s", "predicted_total_s",
        "total_error_pct", "mape", "median_ape", "by_label": {...}}}``; error = predicted − measured,
        in percent of measured.
    """
    records = check_records(records)
    nranks = len({r["rank"] for r in records})
    rows = []
    for s in per_superstep(records):  # w, h (and the h rank's messages), measured time
        local = s["records"] > 0
        pred = profile.superstep_cost(s["w_s"], s["h_bytes"], s["h_msgs"], local=local)
        regime = ("local" if local else "empty") if s["h_bytes"] <= 0 else \
            profile.regime_for(s["h_bytes"] / max(s["h_msgs"], 1)).name
        err = 100.0 * (pred - s["measured_s"]) / s["measured_s"] if s["measured_s"] > 0 else 0.0
        rows.append({**s, "regime": regime, "predicted_s": pred, "error_pct": err})
    ape = np.abs([r["error_pct"] for r in rows])
    measured = sum(r["measured_s"] for r in rows)
    predicted = sum(r["predicted_s"] for r in rows)
    by_label: dict[str, dict[str, float]] = {}
    for r in rows:
        key = r["label"] or "(none)"
        g = by_label.setdefault(key, {"supersteps": 0, "measured_s": 0.0, "predicted_s": 0.0})
        g["supersteps"] += 1
        g["measured_s"] += r["measured_s"]
        g["predicted_s"] += r["predicted_s"]
    for g in by_label.values():
        g["error_pct"] = 100.0 * (g["predicted_s"] - g["measured_s"]) / g["measured_s"] if g["measured_s"] else 0.0
    summary = {
        "supersteps": len(rows), "ranks": nranks, "profile_nprocs": profile.nprocs,
        "measured_total_s": measured, "predicted_total_s": predicted,
        "total_error_pct": 100.0 * (predicted - measured) / measured if measured else 0.0,
        "mape": float(ape.mean()), "median_ape": float(np.median(ape)), "by_label": by_label,
    }
    if nranks != profile.nprocs:
        summary["note"] = (f"the profile was measured on {profile.nprocs} ranks and the run used {nranks}: "
                           "g and l depend on p, probe at the run's size for a fair comparison")
    return {"supersteps": rows, "summary": summary}


def format_comparison(doc: dict[str, Any], limit: int = 40) -> str:
    """The ledger table with predictions, then the summary."""
    rows = doc["supersteps"]
    lines = [f"  {'step':>5} {'label':<16} {'w [ms]':>9} {'h [bytes]':>11} {'regime':>7} "
             f"{'predicted [ms]':>14} {'measured [ms]':>13} {'error %':>8}"]
    shown = rows if len(rows) <= limit else rows[: max(limit - 2, 0)] + rows[-2:]
    for j, r in enumerate(shown):
        if len(rows) > limit and j == max(limit - 2, 0):
            lines.append(f"  {'...':>5}")
        lines.append(f"  {r['index']:>5} {str(r['label'] or '')[:16]:<16} {1e3 * r['w_s']:>9.3f} {r['h_bytes']:>11,} "
                     f"{r['regime']:>7} {1e3 * r['predicted_s']:>14.3f} {1e3 * r['measured_s']:>13.3f} "
                     f"{r['error_pct']:>+8.1f}")
    s = doc["summary"]
    lines.append(f"BSP model w + g·h + l over {s['supersteps']} supersteps on {s['ranks']} rank(s): predicted "
                 f"{1e3 * s['predicted_total_s']:.3f} ms, measured {1e3 * s['measured_total_s']:.3f} ms "
                 f"(total error {s['total_error_pct']:+.1f} %); per superstep MAPE {s['mape']:.1f} %, "
                 f"median {s['median_ape']:.1f} %")
    for label, g in s["by_label"].items():
        lines.append(f"  {label:<20} {g['supersteps']:>5} supersteps  predicted {1e3 * g['predicted_s']:>10.3f} ms  "
                     f"measured {1e3 * g['measured_s']:>10.3f} ms  ({g['error_pct']:+.1f} %)")
    if s.get("note"):
        lines.append(f"note: {s['note']}")
    return "\n".join(lines)
