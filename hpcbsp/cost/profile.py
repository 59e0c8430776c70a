"""The machine profile: the BSP parameters r, g and l measured by ``hpcbsp-cost probe``.

Layout (``"format": "hpcbsp-bsp-profile/1"``)::

    {"format": ..., "nprocs": P, "r_flops": flop/s, "r_spread": [min, max] over ranks,
     "l_empty": s (a sync that moves no data: the control step only),
     "l_local": s (a sync in which every rank puts one word to itself: the exchange runs, no
                message moves; absent from older profiles),
     "regimes": [{"name": "words"|"blocks", "message_bytes": [lo, hi], "g": s/byte, "l": s,
                  "g_interval": [lo, hi], "l_interval": [lo, hi], "fit_rel_rmse": float,
                  "h_bytes": [...], "seconds": [...], "spread": [[lo, hi], ...]}, ...],
     "host", "date", "mpi_library", "mpi4py", "python", ...}

``words`` is the bspbench h-relation (h single 8-byte messages per rank: g includes the
per-message overhead); ``blocks`` sends h bytes as one message to each other rank (bandwidth).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from .errors import CostInputError
from .modelfile import load_json

FORMAT = "hpcbsp-bsp-profile/1"


@dataclass(frozen=True)
class Regime:
    """g and l for messages of one size range."""

    name: str
    message_bytes: tuple[float, float]
    g: float  # seconds per byte
    l: float  # seconds

    def cost(self, h_bytes: float) -> float:
        return self.l + self.g * h_bytes


@dataclass(frozen=True)
class Profile:
    """What the cost model needs of a machine profile."""

    nprocs: int
    r_flops: float
    l_empty: float
    regimes: tuple[Regime, ...]
    data: dict[str, Any]
    l_local: float | None = None

    def regime_for(self, message_bytes: float) -> Regime:
        """The regime whose measured message sizes are nearest (in log scale) to ``message_bytes``."""
        size = max(message_bytes, 1.0)

        def distance(reg: Regime) -> float:
            lo, hi = reg.message_bytes
            if lo <= size <= hi:
                return 0.0
            return min(abs(math.log(size / max(lo, 1.0))), abs(math.log(size / max(hi, 1.0))))

        return min(self.regimes, key=distance)

    def superstep_cost(self, w: float, h_bytes: float, messages: float, local: bool = False) -> float:
        """Predicted w + g·h + l.  A superstep that moves nothing between ranks costs w + l_empty
        when no rank has a record (the runtime runs only its control step), and w + l_local when
        some rank has records for itself (``local``: the exchange runs on it, without messages;
        a profile without ``l_local`` uses the l of its smallest-message regime instead)."""
        if h_bytes <= 0:
            if not local:
                return w + self.l_empty
            if self.l_local is not None:
                return w + self.l_local
            return w + min(self.regimes, key=lambda reg: reg.message_bytes[0]).l
        reg = self.regime_for(h_bytes / max(messages, 1.0))
        return w + reg.cost(h_bytes)


def profile_from_dict(data: dict[str, Any], source: str = "<memory>") -> Profile:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CostInputError(f"{source} is not an hpcbsp machine profile (expected \"format\": \"{FORMAT}\"; "
                             "write one with `mpiexec -n P hpcbsp-cost probe -o PROFILE.json`)")
    try:
        regimes = tuple(Regime(str(r["name"]), (float(r["message_bytes"][0]), float(r["message_bytes"][1])),
                               float(r["g"]), float(r["l"])) for r in data["regimes"])
        profile = Profile(int(data["nprocs"]), float(data["r_flops"]), float(data["l_empty"]), regimes, data,
                          None if data.get("l_local") is None else float(data["l_local"]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CostInputError(f"{source}: malformed machine profile ({exc})") from None
    if not regimes:
        raise CostInputError(f"{source}: the machine profile has no g/l regimes")
    return profile


def load_profile(path: str | os.PathLike) -> Profile:
    """Read PROFILE.json."""
    return profile_from_dict(load_json(path, "machine profile"), os.fspath(path))
