"""Spike raster plot (PNG, matplotlib's Agg backend): spikes over time, and the population rate."""
from __future__ import annotations

import math

import numpy as np

#: At most this many neuron rows are drawn (every k-th neuron beyond it), to keep the PNG readable.
MAX_ROWS = 1000


def save_raster(path: str, steps: np.ndarray, ids: np.ndarray, *, dt_ms: float, neurons: int,
                total_steps: int, title: str = "") -> str | None:
    """Write a raster plot of the spikes (above) and the population rate in 1 ms bins (below).

    Returns ``path``, or ``None`` without writing anything if matplotlib is not installed (see
    :func:`missing_matplotlib` for the message to show).
    """
    if missing_matplotlib():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stride = max(1, math.ceil(neurons / MAX_ROWS))
    shown = ids % stride == 0
    t_ms = steps * dt_ms
    fig, (ax, ax_rate) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, height_ratios=[3, 1])
    ax.scatter(t_ms[shown], ids[shown], s=1.0, marker="|", linewidths=0.5, color="k")
    ax.set_ylim(-0.5, neurons - 0.5)
    ax.set_ylabel("neuron" + (f" (every {stride}th)" if stride > 1 else ""))
    ax.set_title(title)
    bin_ms = max(dt_ms, 1.0)
    t_end = total_steps * dt_ms
    edges = np.arange(0.0, t_end + bin_ms, bin_ms)
    counts, _ = np.histogram(t_ms, bins=edges)
    ax_rate.plot(edges[:-1], counts / (neurons * bin_ms * 1e-3), color="C0", lw=0.8)
    ax_rate.set_xlabel("time [ms]")
    ax_rate.set_ylabel("rate [Hz]")
    ax_rate.set_xlim(0.0, t_end)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def missing_matplotlib() -> str | None:
    """A one-line reason if matplotlib cannot be imported, else ``None``."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib); no raster plot written"
    return None
