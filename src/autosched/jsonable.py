"""Plain JSON data from anything the project reports: one converter for every JSON surface."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any


def jsonable(x: Any) -> Any:
    """Dataclasses, ``to_dict`` objects, mappings, sequences and numpy values as plain JSON
    types; nan and infinity become None (strict JSON has neither); anything else its str."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else None
    if hasattr(x, "to_dict"):
        return jsonable(x.to_dict())
    if hasattr(x, "__dataclass_fields__"):
        return jsonable(asdict(x))
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return jsonable(x.tolist())
    if hasattr(x, "item"):
        return jsonable(x.item())
    return str(x)
