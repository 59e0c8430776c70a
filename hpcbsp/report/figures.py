"""The report's figures, drawn with matplotlib (Agg, no display; imported only here, as
:mod:`hpcbsp.cost.plot` does) and returned as PNG bytes.

Past :data:`MAX_POINTS` supersteps a figure draws bins of consecutive supersteps (sums on the
timeline, means elsewhere), never one mark per superstep: a figure's size does not grow with the
run.
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np

from ..cost.errors import CostInputError
from .analysis import Run

__all__ = ["MAX_POINTS", "bins", "bytes_figure", "lateness_figure", "prediction_figure", "timeline_figure"]

#: The most supersteps a figure draws one by one; more are drawn in at most this many bins.
MAX_POINTS = 2000
_COLOURS = {"work": "#4c72b0", "wait": "#dd8452", "exchange": "#55a868"}


def _pyplot() -> Any:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CostInputError("hpcbsp report draws with matplotlib: pip install 'hpcbsp[plot]'") from None
    return plt


def bins(steps: int) -> np.ndarray:
    """The first superstep (row) of each bin: every row up to :data:`MAX_POINTS`, else
    :data:`MAX_POINTS` bins of consecutive rows."""
    if steps <= MAX_POINTS:
        return np.arange(steps)
    return np.unique(np.linspace(0, steps, MAX_POINTS, endpoint=False).astype(np.int64))


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return out.getvalue()


def _rank_ticks(ax: Any, nranks: int) -> None:
    ax.set_yticks(np.unique(np.linspace(0, nranks - 1, min(nranks, 16)).astype(int)))


def timeline_figure(run: Run) -> bytes:
    """One row per rank: its work, wait and exchange in time (bins of supersteps past
    :data:`MAX_POINTS`)."""
    plt = _pyplot()
    work, wait, exchange = run.split()
    first = bins(run.steps)
    starts = np.nan_to_num(run.start)[first]
    sums = [np.add.reduceat(part, first, axis=0) for part in (work, wait, exchange)]
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.45 * min(run.nranks, 64)))
    for rank in range(run.nranks):
        at = starts[:, rank].copy()
        for name, part in zip(("work", "wait", "exchange"), sums):
            ax.broken_barh(list(zip(at, part[:, rank])), (rank - 0.4, 0.8), color=_COLOURS[name],
                           label=name if rank == 0 else None)
            at = at + part[:, rank]
    ax.set_xlabel("seconds since the context started")
    ax.set_ylabel("rank")
    ax.set_ylim(run.nranks - 0.5, -0.5)
    _rank_ticks(ax, run.nranks)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, fontsize="small")
    binned = "" if run.steps <= MAX_POINTS else f" (in bins of about {run.steps // first.size} supersteps)"
    ax.set_title(f"timeline per rank{binned}", loc="left")
    return _png(fig)


def lateness_figure(run: Run) -> bytes:
    """Each rank's work minus the superstep's median work, in ms (supersteps x ranks; bins
    averaged past :data:`MAX_POINTS`)."""
    plt = _pyplot()
    late = run.late()
    first = bins(run.steps)
    over = np.nan_to_num(run.work - late.median_s[:, None]) * 1e3
    counts = np.diff(np.append(first, run.steps))[:, None]
    mean = np.add.reduceat(over, first, axis=0) / counts if run.steps else over
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.3 * min(run.nranks, 64)))
    top = float(np.abs(mean).max()) if mean.size else 1.0
    image = ax.imshow(mean.T, aspect="auto", cmap="RdBu_r", vmin=-top or -1, vmax=top or 1, interpolation="nearest",
                      extent=(0, run.steps, run.nranks - 0.5, -0.5))
    fig.colorbar(image, ax=ax, label="work - median work [ms]")
    ax.set_xlabel("superstep (row of the ledger)")
    ax.set_ylabel("rank")
    _rank_ticks(ax, run.nranks)
    ax.set_title("lateness per superstep and rank (red: later than the median)")
    return _png(fig)


def bytes_figure(run: Run) -> bytes:
    """Payload bytes between rank pairs over the run, a heatmap (sender x receiver), where the
    ledger has them per destination (:attr:`Run.bytes_to`); otherwise what each rank sent and
    received (its rows count bytes per rank and superstep only)."""
    plt = _pyplot()
    if run.bytes_to is not None:
        fig, ax = plt.subplots(figsize=(6.5, 5.5))
        image = ax.imshow(run.bytes_to, cmap="viridis", interpolation="nearest")
        fig.colorbar(image, ax=ax, label="payload bytes, whole run")
        ax.set_xlabel("to rank")
        ax.set_ylabel("from rank")
        _rank_ticks(ax, run.nranks)
        ax.set_xticks(ax.get_yticks())
        ax.set_title("bytes between rank pairs")
        return _png(fig)
    ranks = np.arange(run.nranks)
    fig, ax = plt.subplots(figsize=(10, 3.5))
    ax.bar(ranks - 0.2, run.bytes_out.sum(axis=0), width=0.4, label="bytes out")
    ax.bar(ranks + 0.2, run.bytes_in.sum(axis=0), width=0.4, label="bytes in")
    ax.set_xlabel("rank")
    ax.set_ylabel("payload bytes, whole run")
    ax.legend(fontsize="small")
    ax.set_title("bytes between ranks, per rank")
    return _png(fig)


def prediction_figure(indices: np.ndarray, measured: np.ndarray, predicted: np.ndarray, what: str) -> bytes:
    """Predicted against measured seconds per superstep (means of bins past :data:`MAX_POINTS`)."""
    plt = _pyplot()
    first = bins(indices.size)
    counts = np.diff(np.append(first, indices.size))
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for values, label in ((measured, "measured"), (predicted, f"predicted ({what})")):
        ax.plot(indices[first], 1e3 * np.add.reduceat(values, first) / counts, label=label,
                marker="." if first.size < 200 else None)
    ax.set_xlabel("superstep")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.legend(fontsize="small")
    ax.set_title("predicted against measured cost per superstep")
    return _png(fig)
