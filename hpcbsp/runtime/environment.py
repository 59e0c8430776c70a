"""The runtime's access to the ``HPCBSP_*`` variables (declared in :mod:`hpcbsp.util.settings`).

:func:`setting` is how every layer from the runtime up reads one: its parsed value, a bad one
as :class:`~.errors.BadInput` (one line naming the variable, its value, what is allowed and what
to do; every rank reads the same environment, so every rank raises it and rank 0 reports it).
:func:`check` is what a context's start does first (:func:`.lifecycle.start`): every variable
set is parsed before anything is made, and a name that is not hpcbsp's gets a warning.
"""
from __future__ import annotations

from typing import Any

from ..util import settings
from .errors import BadInput

__all__ = ["check", "setting"]


def setting(name: str) -> Any:
    """The value of ``$name`` now (its default when unset); :class:`BadInput` for a bad one."""
    try:
        return settings.value(name)
    except settings.SettingError as exc:
        raise BadInput(str(exc)) from None


def check(rank: int) -> None:
    """Parse every ``HPCBSP_*`` variable set (:class:`BadInput` for the first bad one) and warn,
    once per process and on ``rank`` 0 only, of each name that is not hpcbsp's."""
    try:
        warnings = settings.check()
    except settings.SettingError as exc:
        raise BadInput(str(exc)) from None
    settings.warn(warnings, rank)
