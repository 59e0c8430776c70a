"""Every list of words a user picks one from, spelt once: in an argument, an option or an ``HPCBSP_*`` variable.

Each list is a tuple of the words exactly as the user writes them (lower case; the settings
also take them in any case), in the order the help and docs/environment.md show them.  The
code that acts on a choice, the command lines (``choices=``) and the settings
(:mod:`hpcbsp.util.settings`: the values allowed and their parser) all read the tuple here, so
that a word added or renamed changes all three at once (tests/test_choices.py holds them to it,
and finds any module that spells a list again).

* :data:`EXCHANGES`: the BSF farm's master-worker exchange (``hpcbsp.farm``, ``--exchange``,
  ``$HPCBSP_FARM_EXCHANGE``), also the communication form of its cost model (``hpcbsp-cost
  --comm``, a model file's ``"comm"``).
* :data:`ROUTINGS`: the FA-BSP mailboxes' routings by name (``hpcbsp.fabsp.routing``);
  :data:`ROUTING_CHOICES` adds ``auto`` (``bsp.mailbox(routing=)``, ``--routing``,
  ``$HPCBSP_ROUTING``).
* :data:`WAIT_MODES`: how a rank waits for the others (``BSP(wait=)``, ``$HPCBSP_WAIT``).
* :data:`CONTROL_COLLECTIVES`: the control step's allreduce (``$HPCBSP_CONTROL_COLLECTIVE``).
* :data:`TRANSPORTS`: ``auto`` or ``messages`` (the parameter server's weights,
  ``$HPCBSP_PS_TRANSPORT``; ``put_elements``' records, ``$HPCBSP_ELEMENTS_TRANSPORT``).
* :data:`LAUNCHES`: how a command starts the MPI jobs of its own (``--launch``).

No imports: every layer may read it.
"""
from __future__ import annotations

__all__ = ["CONTROL_COLLECTIVES", "EXCHANGES", "LAUNCHES", "ROUTINGS", "ROUTING_CHOICES", "TRANSPORTS",
           "WAIT_MODES", "RESOLVED_WAIT_MODES", "one_of"]

#: The BSF farm's exchange: ``linear`` (the master talks to the workers one by one, the default)
#: or ``tree`` (a binomial tree).
EXCHANGES: tuple[str, ...] = ("linear", "tree")

#: FA-BSP routings by name: ``direct`` (a buffer per destination), ``2d`` and ``3d`` (through a
#: grid of ranks), ``node`` (through one rank of each node).
ROUTINGS: tuple[str, ...] = ("direct", "2d", "3d", "node")
#: What a mailbox, ``--routing`` and ``$HPCBSP_ROUTING`` accept: ``auto`` (by the number of ranks
#: and nodes, the default) or a routing's name.
ROUTING_CHOICES: tuple[str, ...] = ("auto", *ROUTINGS)

#: How a rank waits for the others: ``auto`` (the default), ``spin`` or ``yield``.
WAIT_MODES: tuple[str, ...] = ("auto", "spin", "yield")
#: The modes a context's ``auto`` resolves to, and the ones a wait pauses by.
RESOLVED_WAIT_MODES: tuple[str, ...] = tuple(m for m in WAIT_MODES if m != "auto")

#: The control step's allreduce: ``auto`` (the default: the one the MPI library runs faster),
#: ``persistent`` or ``blocking``.
CONTROL_COLLECTIVES: tuple[str, ...] = ("auto", "persistent", "blocking")

#: Shared memory where it can (``auto``, the default) or always messages.
TRANSPORTS: tuple[str, ...] = ("auto", "messages")

#: How a command starts the MPI jobs of its own: ``mpiexec`` (the default) or ``srun``.
LAUNCHES: tuple[str, ...] = ("mpiexec", "srun")


def one_of(choices: tuple[str, ...]) -> str:
    """``one of `a`, `b`, `c` `` (Markdown code spans): the allowed values as docs/environment.md
    and a setting's error show them."""
    return "one of " + ", ".join(f"`{word}`" for word in choices)
