"""Scheduling policies. Each declares its knobs in a `ConfigSpace`; `POLICIES` is the registry."""

from __future__ import annotations

from ..errors import InputError
from .base import PLACEMENT, Policy
from .fifo import Fifo
from .multifactor import Multifactor
from .qssf import Qssf
from .sjf import Sjf
from .srtf import Srtf
from .tiresias import Tiresias

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (Fifo, Sjf, Srtf, Tiresias, Qssf, Multifactor)
}


class UnknownPolicy(InputError):
    """A policy name that is not registered."""

    pass


def get_policy(name: str) -> type[Policy]:
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None


__all__ = ["Policy", "POLICIES", "PLACEMENT", "get_policy", "UnknownPolicy"]
