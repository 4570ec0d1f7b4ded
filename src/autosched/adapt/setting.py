"""A setting declared once, as data: its default, constraint, help and command-line flag, on its
dataclass field (`setting`), as scikit-learn declares its estimators' parameter constraints.

    budget: int = setting(16, "tuning trials per round", "--budget", "-n", low=1)

A class of settings (`LoopConfig`, `AgentSettings`, run's `Settings`) is `declared`: each field
made with `setting` gets a knob of the project's own kind (`Int`, `Float`, `Bool`, from
`autosched.space`: its name, help, default and range), checked against its default when the class
is made. Everything else is read from these declarations: the range check when a record is made
(`check_settings`), the options of ``autosched run`` and ``autosched agent init``
(`autosched.cli.common`), and the settings tables of the docs (``scripts/settings_table.py``). A
subclass gives a declared field another default with `redefault`, keeping its declaration.
"""

from __future__ import annotations

import math
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar

from ..errors import InputError
from ..space import Bool, ConfigError, Float, Int, Knob

T = TypeVar("T")


@dataclass(frozen=True)
class Setting:
    """How one setting is declared (the field's ``metadata["setting"]``)."""

    help: str
    flags: tuple[str, ...] = ()  # "--budget", "-n"; a pair: "--drift/--no-drift"; (): no flag
    low: float | None = None  # the range a numeric setting must lie in (None: unbounded)
    high: float | None = None
    unit: str = ""
    duration: bool = False  # given as text (7d, 12h) on the command line, held in seconds
    hidden: tuple[str, ...] = ()  # old spellings of the flag, still taken, not shown


def setting(default: Any = MISSING, help: str = "", *flags: str, low: float | None = None,
            high: float | None = None, unit: str = "", duration: bool = False,
            hidden: tuple[str, ...] = (), factory: Callable[[], Any] | None = None) -> Any:
    """A declared field: its `default` (or `factory`), what it does (`help`, also the option's
    help), its command-line `flags` (none: set from a file or Python only) and, for a number, the
    range `low`..`high` it must lie in."""
    meta = {"setting": Setting(help, tuple(flags), low, high, unit, duration, tuple(hidden))}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def redefault(base: type, name: str, default: Any) -> Any:
    """Field `name` of the declared class `base`, with another default (a subclass's own)."""
    f = next(f for f in fields(base) if f.name == name)
    return field(default=default, metadata=f.metadata)


def declared(cls: type[T]) -> type[T]:
    """Class decorator (after ``@dataclass``): the class's ``KNOBS``, each `setting` field's knob
    with the class's own default, checked to lie in its range (a declaration that does not hold
    is a bug: ValueError)."""
    hints = typing.get_type_hints(cls)
    knobs: dict[str, Knob] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        s = f.metadata.get("setting")
        if s is None:
            continue
        knob = _knob(f.name, s, hints[f.name], f)
        if knob is not None:
            knobs[f.name] = knob
    cls.KNOBS = knobs  # type: ignore[attr-defined]  # (each class its own: defaults differ)
    return cls


def _knob(name: str, s: Setting, hint: Any, f: Field[Any]) -> Knob | None:
    kind = _base(hint)
    default = f.default if f.default is not MISSING else None
    if kind is bool:
        return Bool(name, s.help, default=bool(default))
    if kind not in (int, float):
        return None  # text, paths, mappings: their own checks
    lo = -math.inf if s.low is None else s.low
    hi = math.inf if s.high is None else s.high
    if kind is int:
        knob: Knob = Int(name, s.help, low=int(max(lo, -sys.maxsize)), high=int(min(hi, sys.maxsize)),
                         default=0 if default is None else default, unit=s.unit)
    else:
        knob = Float(name, s.help, low=lo, high=hi, default=0.0 if default is None else float(default),
                     unit=s.unit)
    if default is not None:
        try:
            knob.coerce(default)
        except ConfigError as e:
            raise ValueError(f"setting {name}: its default {default!r} is outside its range: {e}") from None
    return knob


def _base(hint: Any) -> Any:
    """`X` of an annotation `X` or `X | None`."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else None
    return typing.get_origin(hint) or hint


def settings_of(cls: type) -> dict[str, Setting]:
    """The declared settings of `cls`, by field, in field order."""
    return {f.name: f.metadata["setting"] for f in fields(cls) if "setting" in f.metadata}


def check_settings(record: Any, error: type[InputError]) -> None:
    """Each numeric setting of `record` within its declared range (None where the field allows
    it); raises `error` naming the setting and the range."""
    hints = typing.get_type_hints(type(record))
    for name, knob in type(record).KNOBS.items():
        value = getattr(record, name)
        if isinstance(knob, Bool) or (value is None and _base(hints[name]) is not hints[name]):
            continue
        if not knob.low <= value <= knob.high:  # (types are checked first: a number here)
            raise error(f"{name.replace('_', ' ')} {value!r}: must be {range_text(knob)}")


def range_text(knob: Knob) -> str:
    """A numeric knob's range in words: "at least 1", "in [0, 1]", "at most 5"."""
    assert isinstance(knob, (Int, Float))
    low = knob.low if knob.low > -sys.maxsize else -math.inf
    high = knob.high if knob.high < sys.maxsize else math.inf
    unit = f" {knob.unit}" if knob.unit else ""
    if high == math.inf:
        return f"at least {_num(low)}{unit}" if low != -math.inf else "a number"
    if low == -math.inf:
        return f"at most {_num(high)}{unit}"
    return f"in [{_num(low)}, {_num(high)}]{unit}"


def _num(v: float) -> str:
    return str(v) if isinstance(v, int) else f"{v:g}"
