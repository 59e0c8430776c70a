"""A spiking neural network simulator on hpcbsp: BSP supersteps of one minimum synaptic delay, and
asynchronous stepping with lookahead; both give the serial reference's spike trains exactly.

    mpiexec -n P python -m hpcbsp.apps.snn --mode bsp|async|serial [options]   (see --help)

Modules: :mod:`.lif` (neuron model, Numba kernels), :mod:`.network` (the generated network and
its distribution), :mod:`.local` (one rank's windowed simulation state), :mod:`.bsp_mode`,
:mod:`.async_mode`, :mod:`.serial` (the reference), :mod:`.result` (figures, spike collection),
:mod:`.raster` (PNG plot).
"""
from __future__ import annotations

from .lif import LIFParams
from .network import NetworkSpec
from .result import RunResult

__all__ = ["LIFParams", "NetworkSpec", "RunResult"]
