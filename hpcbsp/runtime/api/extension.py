"""The runtime's interface for extensions: what a layer built on a BSP context may use of it.

FA-BSP mailboxes (:mod:`hpcbsp.fabsp`) and checkpoints (:mod:`.checkpoint`) are built on this
and on the context's public attributes (``comm``, ``pid``, ``nprocs``, ``superstep``,
``timeout``), never on its private members, as Bulk gives its containers a protected interface::

    ext = bsp.extension
    ext.agree(Kind.REGISTER, "mailbox <i8", describe)   # a collective step with its agreement check
    ext.add_sync_hook(engine)                           # takes part in every superstep-ending call
    ext.sync_hook(Engine)                               # the hook of that type, if any
    ext.add_close_hook(engine.close)                    # runs when the context is released
    ext.state                                           # "open", "closed" or "failed"
    ext.compiled_sync                                   # the empty sync's control step is compiled
    ext.control_collective                              # ... and is a persistent or a blocking allreduce
    ext.pending                                         # requests waiting for the next sync
    ext.arena                                           # the shared arena of element puts (diagnostics)
    ext.coarrays()                                      # the registered coarrays, in order
    ext.check_pid(pid, "box.send")                      # an int rank, or a UsageError

Context methods that a layer above the runtime provides (``bsp.mailbox``) are registered here by
that layer with :func:`provide` when it is imported (``import hpcbsp`` imports
:mod:`hpcbsp.fabsp`), so that no runtime module imports a layer above it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ..errors import UsageError
from ..superstep.control import Kind, signature
from .records import check_pid

if TYPE_CHECKING:
    from ..superstep.arena import Arena
    from ..superstep.supersteps import SyncHook
    from .coarray import Coarray
    from .context import BSP

H = TypeVar("H")

#: Context methods provided by layers above the runtime: name -> factory(bsp, *args, **kw).
_PROVIDED: dict[str, Callable[..., Any]] = {}


def provide(name: str, factory: Callable[..., Any]) -> None:
    """Make ``bsp.<name>(*args, **kw)`` call ``factory(bsp, *args, **kw)`` (done at import by
    the layer that implements it)."""
    _PROVIDED[name] = factory


def provided(name: str) -> Callable[..., Any]:
    """The factory registered for ``bsp.<name>``; a :class:`UsageError` if its layer was not
    imported."""
    try:
        return _PROVIDED[name]
    except KeyError:
        raise UsageError(f"bsp.{name} is provided by a layer above the runtime that is not "
                         "imported: `import hpcbsp` imports every layer") from None


class Extension:
    """The extension interface of one context (``bsp.extension``); see the module docstring."""

    __slots__ = ("_bsp",)

    def __init__(self, bsp: "BSP"):
        self._bsp = bsp

    def agree(self, kind: Kind, what: str, describe: Callable[[], str]) -> None:
        """Collective: a control step in which every rank must make the same call.

        ``kind`` is what the ranks do (``Kind.REGISTER`` to create something); ``what`` is a
        text that must be equal on every rank (its signature is compared, e.g. the dtype of a
        registered object); ``describe()`` says what this rank does, for the error.  Ranks that
        differ raise :class:`~.errors.Divergence` on every rank.  Waits with mailbox progress
        and within the context's timeout.  No data moves; it is not a superstep.
        """
        self._bsp._agree(kind, signature(what), describe)

    def add_sync_hook(self, hook: "SyncHook") -> None:
        """Make ``hook`` take part in every superstep-ending call (collectively, on every rank):
        its ``progress()`` runs while this rank waits in a control step, its ``quiesce()`` in
        every sync.  The context then uses its non-blocking control step."""
        self._bsp._add_sync_hook(hook)

    def sync_hook(self, cls: type[H]) -> H | None:
        """The registered sync hook that is an instance of ``cls``, if any."""
        return next((h for h in self._bsp._hooks if isinstance(h, cls)), None)

    def add_close_hook(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when the context is released (closed, or failed and left), last added
        first; an exception from it propagates after the context's communicator is freed."""
        self._bsp._life.add_close_hook(fn)

    @property
    def state(self) -> str:
        """``"open"``, ``"closed"`` or ``"failed"`` (a control step raised on this rank)."""
        return self._bsp._life.state

    @property
    def compiled_sync(self) -> bool:
        """True when this context's blocking control step (an empty sync) runs as one compiled
        call (:mod:`.native`), False where it goes through mpi4py's Python calls."""
        return self._bsp._control.blocking_step is not None

    @property
    def control_collective(self) -> str:
        """``"persistent"`` or ``"blocking"``: the allreduce this context's blocking control step
        makes (``$HPCBSP_CONTROL_COLLECTIVE``; the same on every rank, :mod:`.control`)."""
        return self._bsp._control.collective

    @property
    def pending(self) -> int:
        """The number of this rank's put, get and send requests waiting for the next sync."""
        return self._bsp._outbox.nrecords

    @property
    def arena(self) -> "Arena | None":
        """The node's shared arena that packed element puts travel through (:mod:`.arena`; None
        with one rank), for diagnostics and tests: its ``half_bytes`` (0 while records go as
        messages), ``announced`` (records this rank placed in it) and ``active``."""
        return self._bsp._outbox.arena

    def coarrays(self) -> "list[Coarray]":
        """The registered coarrays in registration order (including scratch ones)."""
        from .coarray import Coarray

        return [obj for obj in self._bsp._objects if isinstance(obj, Coarray)]

    def check_pid(self, pid: Any, what: str) -> int:
        """``pid`` as an int if it is a rank of this context, else a :class:`UsageError` that
        names this rank and ``what`` (the call)."""
        return check_pid(pid, self._bsp.nprocs, self._bsp.pid, what)
