"""The memory of the parameter server's gradient slots, and the share of a node they may take.

With the gradient slots (:mod:`.transport`), the server's shared window holds the weights and a
slot per worker, ``P`` values each, of ``w`` bytes for the weights and ``g`` for a slot (the
gradients' wire type: the weights' own, or 2 bytes for float16 and bfloat16):
``P × (w + workers × g)`` bytes on the server's node (each part padded to a 64-byte line; the
control words, a few lines per chunk of 1 MiB, come on top).  A 1 M-parameter float32 model with
15 workers takes 64 MiB with float32 gradients, 34 MiB with bfloat16 ones; a 1 G-parameter one
64 GiB (34 GiB), more than many nodes have.  So the window takes the slots only where they fit
``$HPCBSP_SLOT_MEMORY_SHARE`` (a number in (0, 1], default 0.25) of the node's physical
memory; elsewhere the gradients travel as messages, and :func:`slot_window_fits` gives the line
that says so.
"""
from __future__ import annotations

import os

from ..runtime.environment import setting

__all__ = ["SLOT_SHARE_ENV", "slot_window_bytes", "slot_window_fits"]

SLOT_SHARE_ENV = "HPCBSP_SLOT_MEMORY_SHARE"
LINE = 64


def _lines(nbytes: int) -> int:
    return -(-nbytes // LINE) * LINE


def slot_window_bytes(count: int, itemsize: int, workers: int, grad_itemsize: int | None = None) -> int:
    """Bytes of the weights and the workers' gradient slots in the window: ``count × itemsize``
    bytes of weights and ``workers`` slots of ``count × grad_itemsize`` (default ``itemsize``),
    each part rounded up to a 64-byte line."""
    return _lines(count * itemsize) + workers * _lines(count * (grad_itemsize or itemsize))


def node_memory() -> int:
    """This node's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def slot_window_fits(count: int, itemsize: int, workers: int, memory: int | None = None,
                     grad_itemsize: int | None = None) -> tuple[bool, str]:
    """Whether the slots' window (:func:`slot_window_bytes`) fits ``$HPCBSP_SLOT_MEMORY_SHARE``
    of ``memory`` (default :func:`node_memory`), and the one line that says so when it does not
    ("" when it does)."""
    memory = node_memory() if memory is None else memory
    share = float(setting(SLOT_SHARE_ENV))
    grad_itemsize = grad_itemsize or itemsize
    need = slot_window_bytes(count, itemsize, workers, grad_itemsize)
    if need <= share * memory:
        return True, ""
    return False, (f"[hpcbsp] parameter server: gradients as messages, not in the shared window: its "
                   f"slots would take {need / 2**20:.1f} MiB ({count:,} weights of {itemsize} bytes + "
                   f"{workers} workers x {count:,} gradient values of {grad_itemsize} bytes), more than "
                   f"${SLOT_SHARE_ENV}={share:g} of this node's {memory / 2**30:.1f} GiB")
