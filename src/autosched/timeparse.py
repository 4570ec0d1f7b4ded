"""Durations and times as people type them: ``21d``, ``12h``, ``90m``, ``30s``, ``1w``, ``3600``.

One helper for every command line option that takes a length of time, so all of them accept the
same spellings and fail with the same message.
"""

from __future__ import annotations

import math
import re

from .errors import InputError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PATTERN = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([smhdwSMHDW]?)\s*$")


class TimeParseError(InputError):
    """Text that is not a duration."""


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """Seconds in `text`: a number (seconds) with an optional unit s, m, h, d or w.

    ``parse_duration("21d") == 1814400.0``; ``parse_duration("3600") == 3600.0``. Negative values
    are returned as such (callers that need a positive length check it themselves, with their own
    message); infinities and NaN are errors.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _PATTERN.match(str(text))
        if not m:
            raise TimeParseError(
                f"{what} {text!r} is not a length of time; use seconds or a number with a unit "
                "s, m, h, d or w (e.g. 3600, 12h, 21d)"
            )
        value = float(m.group(1)) * UNITS[(m.group(2) or "s").lower()]
    if not math.isfinite(value):
        raise TimeParseError(f"{what} {text!r} is not finite")
    return value


def format_duration(seconds: float) -> str:
    """An exact spelling in the largest whole unit up to days: 1814400 -> '21d', 5400 -> '90m'."""
    for unit in ("d", "h", "m"):
        size = UNITS[unit]
        if seconds and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


__all__ = ["parse_duration", "format_duration", "TimeParseError", "UNITS"]
