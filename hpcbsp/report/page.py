"""The report's page: one self-contained HTML file (no server, no file beside it: the figures
are inline PNGs as base64 ``data:`` URIs, the style inline), ``DIR/report.html``.

:func:`write` draws the figures (:mod:`.figures`) of a :class:`~.analysis.Run`, with the BSP
prediction per superstep when a machine profile is given (:func:`hpcbsp.cost.bspmodel.compare`,
``hpcbsp-cost probe``'s profile read by :func:`hpcbsp.cost.profile.load_profile`) and the BSF
model's time per farm iteration when a model is given.
"""
from __future__ import annotations

import base64
import html
import os

import numpy as np

from ..cost.bspmodel import compare
from ..cost.modelfile import CalibratedModel
from ..cost.profile import Profile
from . import figures
from .analysis import FARM_RESULT, FARM_START, Run, farm_iterations, text

__all__ = ["FIGURES", "write"]

#: The ids of the page's figures, in order (``prediction`` only with a profile, ``prediction-bsf``
#: only with a BSF model).
FIGURES = ("timeline", "lateness", "bytes", "prediction", "prediction-bsf")

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:80em}pre{background:#f4f4f4;padding:1em;white-space:pre-wrap;"
          "overflow-x:auto}img{max-width:100%}figcaption{color:#444;font-size:90%}")


_BYTES_PAIRS = ("Payload bytes from each rank (row) to each rank (column) over the run: puts, gets' replies, queue "
                "records and mailbox messages (to their next hop); the collectives' are not counted per destination.")
_BYTES_RANKS = ("Payload bytes each rank sent and received over the run (this ledger has no bytes per destination: "
                "a .csv, or a ledger of an older hpcbsp; save it as .json for the rank-pair matrix).")


def _figure(ident: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="{ident}"><img alt="{ident}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def write(run: Run, directory: str, profile: Profile | None = None, model: CalibratedModel | None = None) -> str:
    """Write ``directory/report.html`` for ``run``; return its path.  With a BSF ``model``
    (``hpcbsp-cost fit``, read by :func:`hpcbsp.cost.modelfile.load_model`) the farm's iterations
    (:func:`~.analysis.farm_iterations`) are drawn against its T(K) for K = p - 1 workers."""
    parts = [_figure("timeline", figures.timeline_figure(run),
                     "Per rank: work (the ledger's work_s), wait (the superstep's longest work minus this rank's) "
                     "and exchange (the rest of its sync time)."),
             _figure("lateness", figures.lateness_figure(run),
                     "Each rank's work minus the superstep's median work, in ms."),
             _figure("bytes", figures.bytes_figure(run), _BYTES_PAIRS if run.bytes_to is not None else _BYTES_RANKS)]
    if profile is not None:
        doc = compare(run.records, profile)
        rows = doc["supersteps"]
        parts.append(_figure("prediction", figures.prediction_figure(
            np.array([r["index"] for r in rows]), np.array([r["measured_s"] for r in rows]),
            np.array([r["predicted_s"] for r in rows]), "BSP w + g·h + l"),
            f"The BSP model's prediction per superstep against the measured time (max over ranks of work + sync); "
            f"total error {doc['summary']['total_error_pct']:+.1f} %."))
    if model is not None:
        iterations = farm_iterations(run)
        workers = max(run.nranks - 1, 1)
        predicted = float(model.model.time(workers)[0])
        parts.append(_figure("prediction-bsf", figures.prediction_figure(
            np.arange(iterations.size), iterations, np.full(iterations.size, predicted), f"BSF T(K), K = {workers}"),
            f"The BSF model's time per iteration T(K) for K = {workers} workers against each measured farm "
            f"iteration (a {FARM_START!r} superstep and its {FARM_RESULT!r} ones); mean error "
            f"{100 * (predicted - iterations.mean()) / iterations.mean():+.1f} %."))
    body = "\n".join(parts)
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>hpcbsp report: "
            f"{html.escape(os.path.basename(run.source))}</title><style>{_STYLE}</style></head><body>\n"
            f"<h1>hpcbsp report</h1>\n<pre id=\"summary\">{html.escape(text(run))}</pre>\n{body}\n</body></html>\n")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
