"""Durations and times as people type them: ``21d``, ``12h``, ``90m``, ``30s``, ``1w``, ``3600``.

One helper for every command line option that takes a length of time, so all of them accept the
same spellings and fail with the same message, and one bound for each kind of time option:

- a **length** (a horizon, a period, a history, a step, a look-back): > 0 and at most
  `MAX_LENGTH`, 366 days (`parse_length`, `check_length`);
- a **time** (a start, an ``--until``): seconds since the trace's origin, in
  ``[0, MAX_TIME]``, the bound on submit times (`parse_time`); a command that has the trace
  also keeps the time within `MAX_LENGTH` of its last submission (`check_within`).

A typo such as ``--until 3000000d`` then fails at once instead of filling the machine's memory.
"""

from __future__ import annotations

import math
import re

from .errors import InputError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PATTERN = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([smhdwSMHDW]?)\s*$")

DAY = 86400.0
YEAR = 365 * 86400  # (ints: the bounds are printed in messages as 31,536,000)
# The longest length of time an option takes: one sampled or simulated period, a history window,
# a look-back. A year of the busiest public trace is a few million jobs.
MAX_LENGTH = 366 * DAY
# The latest time: submit times (and the options that name a time) count seconds from a trace's
# origin, or from the Unix epoch (2026 is 1.8e9 s); 100 years leaves room for both.
MAX_TIME = 100 * YEAR


class TimeParseError(InputError):
    """Text that is not a duration, or one outside its option's bound."""


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """Seconds in `text`: a number (seconds) with an optional unit s, m, h, d or w.

    ``parse_duration("21d") == 1814400.0``; ``parse_duration("3600") == 3600.0``. Negative values
    are returned as such, and there is no upper bound: options use `parse_length` or
    `parse_time`, which add theirs. Infinities and NaN are errors.
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


def parse_length(text: str | float | int, what: str, limit: float = MAX_LENGTH) -> float:
    """A length of time for option `what`: > 0 and at most `limit` (366 days unless the option
    has a tighter bound). ``parse_length("7d", "--horizon") == 604800.0``."""
    return check_length(parse_duration(text, what), what, limit, shown=text)


def check_length(seconds: float, what: str, limit: float = MAX_LENGTH, shown: object = None) -> float:
    """`seconds` if it is a length of time in (0, `limit`]; otherwise a `TimeParseError` naming
    `what` (and the value as given, `shown`). For lengths that come as numbers (a settings file,
    an API call) rather than as text."""
    given = seconds if shown is None else shown
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise TimeParseError(f"{what} {given!r} is not a finite number of seconds")
    if not seconds > 0:
        raise TimeParseError(f"{what} must be > 0 (got {given!r})")
    if seconds > limit:
        raise TimeParseError(f"{what} of {_days(seconds)} is beyond the {limit / DAY:g}-day limit")
    return float(seconds)


def parse_time(text: str | float | int, what: str) -> float:
    """A time for option `what`, in seconds since the trace's origin: in [0, `MAX_TIME`]."""
    value = parse_duration(text, what)
    if value < 0:
        raise TimeParseError(f"{what} must be >= 0 (got {text!r}): times count from the trace's origin")
    if value > MAX_TIME:
        raise TimeParseError(f"{what} {text!r} is beyond the bound on times ({MAX_TIME:,.0f} s, 100 years)")
    return value


def check_within(t: float, what: str, last: float, limit: float = MAX_LENGTH) -> float:
    """`t` if it is at most `limit` after `last` (a trace's or a history's last submission): a
    time far past the data would only stretch a window with no jobs in it."""
    if t - last > limit:
        raise TimeParseError(f"{what} of {_days(t)} is {_days(t - last)} after the last submission (at "
                             f"{_days(last)}); the limit is {limit / DAY:g} days")
    return t


def _days(seconds: float) -> str:
    """``100,000 days``, ``3,000,000 days``, ``1.16e+295 days``: whole numbers shown in full up
    to a billion days."""
    days = seconds / DAY
    return f"{days:,.6g} days" if days < 1e5 or days >= 1e9 else f"{days:,.0f} days"


def format_duration(seconds: float) -> str:
    """An exact spelling in the largest whole unit up to days: 1814400 -> '21d', 5400 -> '90m'."""
    for unit in ("d", "h", "m"):
        size = UNITS[unit]
        if seconds and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


__all__ = ["parse_duration", "parse_length", "parse_time", "check_length", "check_within", "format_duration",
           "TimeParseError", "UNITS", "MAX_LENGTH", "MAX_TIME", "YEAR", "DAY"]
