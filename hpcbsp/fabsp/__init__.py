"""Fine-grained asynchronous BSP (FA-BSP): mailboxes with handlers, aggregation, quiescence.

Use through the BSP context::

    box = bsp.mailbox(handler, dtype, buffer=..., max_pending=...)   # collective
    box.send(pids, records)      # any time during the superstep; handlers run on the receivers
    bsp.progress()               # let messages move during long local work
    bsp.sync()                   # returns when every mailbox is quiescent on every rank

Importing this package provides ``BSP.mailbox`` (through
:func:`hpcbsp.runtime.api.extension.provide`, so that the runtime never imports this layer);
``import hpcbsp`` does it.  Modules: :mod:`.mailbox` (the user-facing class), :mod:`.routing`
(the routings a mailbox is given), :mod:`.relay` (records hop to hop), :mod:`.formats` (fixed-size
and ragged records), :mod:`.aggregation` and :mod:`.ragged` (their per-destination buffers), :mod:`.combining`
(records of one key combined on the way, ``combine=``),
:mod:`.engine` (transport, handler loop, failure notices: the context's sync hook) and
:mod:`.termination` (double-wave quiescence detection).
"""
from ..runtime.api.extension import provide
from .mailbox import Mailbox

provide("mailbox", Mailbox)  # bsp.mailbox(...) creates a Mailbox(bsp, ...)

__all__ = ["Mailbox"]
