"""Typed scheduler knobs and the space they form.

A policy declares its knobs once, as a `ConfigSpace`; the CLI, the tuner, reports and exports all
read them from there. A *config* is a plain ``dict`` from knob name to value that has passed
`ConfigSpace.validate`.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .atomic import check_input
from .errors import InputError

Config = dict[str, Any]


class ConfigError(InputError):
    """A config or knob assignment that the space does not accept."""


@dataclass(frozen=True)
class Knob:
    name: str
    help: str
    # Active only when another knob has one of these values: (parent name, allowed values).
    condition: tuple[str, tuple[Any, ...]] | None = field(default=None, kw_only=True)
    # The unit of its values ("" for none). The Slurm converters read it: "s" is a Slurm time
    # string, "min" whole minutes, "sec" plain seconds. Keyword-only, so that subclasses keep
    # their positional fields (name, help, default, ...).
    unit: str = field(default="", kw_only=True)

    def coerce(self, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def sample(self, rng: random.Random) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    default: Any = None


@dataclass(frozen=True)
class Float(Knob):
    low: float = 0.0
    high: float = 1.0
    default: float = 0.0
    log: bool = False
    # The range a search covers (None: all of [low, high]), e.g. the values operators use where
    # the scheduler accepts far more. Validation still accepts all of [low, high].
    search: tuple[float, float] | None = field(default=None, kw_only=True)

    def searched(self) -> tuple[float, float]:
        """The range a search covers: `search`, else [low, high]."""
        return self.search if self.search is not None else (self.low, self.high)

    def coerce(self, value: Any) -> float:
        if isinstance(value, bool):  # JSON true is not 1.0
            raise ConfigError(f"knob {self.name!r}: {value!r} is not a number")
        try:
            x = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"knob {self.name!r}: {value!r} is not a number") from None
        if not math.isfinite(x) or not self.low <= x <= self.high:
            raise ConfigError(
                f"knob {self.name!r}: {x:g} is outside its range [{self.low:g}, {self.high:g}]"
            )
        return x

    def sample(self, rng: random.Random) -> float:
        low, high = self.searched()
        if self.log:
            return math.exp(rng.uniform(math.log(low), math.log(high)))
        return rng.uniform(low, high)

    def describe(self) -> str:
        scale = ", log scale" if self.log else ""
        unit = f" {self.unit}" if self.unit else ""
        searched = f", searched in [{self.search[0]:g}, {self.search[1]:g}]" if self.search else ""
        return f"float in [{self.low:g}, {self.high:g}]{unit}{scale}{searched}"


@dataclass(frozen=True)
class Int(Knob):
    low: int = 0
    high: int = 1
    default: int = 0
    log: bool = False
    search: tuple[int, int] | None = field(default=None, kw_only=True)  # as Float's

    def searched(self) -> tuple[int, int]:
        """The range a search covers: `search`, else [low, high]."""
        return self.search if self.search is not None else (self.low, self.high)

    def coerce(self, value: Any) -> int:
        if isinstance(value, bool):  # JSON true is not 1
            raise ConfigError(f"knob {self.name!r}: {value!r} is not an integer")
        try:
            x = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"knob {self.name!r}: {value!r} is not an integer") from None
        if not math.isfinite(x) or x != int(x):
            raise ConfigError(f"knob {self.name!r}: {value!r} is not an integer")
        if not self.low <= x <= self.high:
            raise ConfigError(
                f"knob {self.name!r}: {int(x)} is outside its range [{self.low}, {self.high}]"
            )
        return int(x)

    def sample(self, rng: random.Random) -> int:
        low, high = self.searched()
        if self.log:
            x = math.exp(rng.uniform(math.log(low), math.log(high + 1)))
            return min(high, int(x))
        return rng.randint(low, high)

    def describe(self) -> str:
        scale = ", log scale" if self.log else ""
        unit = f" {self.unit}" if self.unit else ""
        searched = f", searched in [{self.search[0]}, {self.search[1]}]" if self.search else ""
        return f"int in [{self.low}, {self.high}]{unit}{scale}{searched}"


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class Bool(Knob):
    default: bool = False

    def coerce(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"knob {self.name!r}: {value!r} is not a boolean (use true or false)")

    def sample(self, rng: random.Random) -> bool:
        return rng.random() < 0.5

    def describe(self) -> str:
        return "bool"


@dataclass(frozen=True)
class Categorical(Knob):
    choices: tuple[str, ...] = ()
    default: str = ""

    def coerce(self, value: Any) -> str:
        text = str(value)
        if text not in self.choices:
            raise ConfigError(
                f"knob {self.name!r}: {text!r} is not one of {', '.join(self.choices)}"
            )
        return text

    def sample(self, rng: random.Random) -> str:
        return rng.choice(self.choices)

    def describe(self) -> str:
        return " | ".join(self.choices)


class ConfigSpace:
    """An ordered set of knobs. Validation of every config happens here and nowhere else.

    Besides its knobs, a space may declare how a search should move through it (the tuner reads
    these; a policy that declares none is searched knob by knob):

    - ``weights``: integer knobs (all with low 0) that only matter through their ratios, as a
      scheduler's priority weights do (up to integer truncation). A search moves their direction
      and their scale (the largest weight, in ``weight_scale``) apart.
    - ``archetypes``: named configs (partial: the other knobs keep the search's start values)
      that a search tries first, e.g. "small jobs first".
    - ``secondary``: knobs that seldom move the objective. A search tries each once, moved at
      the best config of its first trials, and keeps searching only those that moved it.

    `restrict` makes the space one search covers: some knobs pinned at one value, some searched
    only within bounds (`pinned`, `bounds`); every config of it is a config of this space.
    """

    def __init__(self, knobs: Iterable[Knob], *, weights: Iterable[str] = (),
                 weight_scale: tuple[float, float] | None = None,
                 archetypes: Mapping[str, Mapping[str, Any]] | None = None,
                 secondary: Iterable[str] = ()):
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        self._by_name = {k.name: k for k in self.knobs}
        if len(self._by_name) != len(self.knobs):
            # Not an input error: every ConfigSpace is declared in code (a policy's or a workload
            # model's class), so a bad declaration is a bug and keeps its traceback (errors.py).
            raise ValueError("duplicate knob names in a ConfigSpace")
        for k in self.knobs:
            k.coerce(k.default)  # a bad default is a programming error: fail at import
            if k.condition and k.condition[0] not in self._by_name:
                raise ValueError(f"knob {k.name!r} depends on unknown knob {k.condition[0]!r}")
            if isinstance(k, (Int, Float)) and k.search is not None:
                lo, hi = k.search
                if not k.low <= lo <= k.default <= hi <= k.high:
                    raise ValueError(f"knob {k.name!r}: search range {k.search} must hold its default "
                                     f"and lie in [{k.low}, {k.high}]")
        # Set by `restrict` only: knobs held at one value, and the bounds given for others.
        self.pinned: dict[str, Any] = {}
        self.bounds: dict[str, tuple[float, float]] = {}
        self.weights: tuple[str, ...] = tuple(weights)
        highs = []
        for name in self.weights:
            w = self._by_name.get(name)
            if not isinstance(w, Int) or w.low != 0 or w.condition is not None:
                raise ValueError(f"weight {name!r}: weights are unconditional Int knobs with low 0")
            highs.append(w.high)
        top = min(highs, default=1)
        self.weight_scale: tuple[float, float] = weight_scale or (1.0, float(top))
        if self.weights and not 0 < self.weight_scale[0] < self.weight_scale[1] <= top:
            raise ValueError(f"weight scale {self.weight_scale}: must lie in (0, {top}]")
        self.archetypes: dict[str, Config] = {}
        for label, partial in (archetypes or {}).items():
            self.validate(partial)  # a bad archetype is a bug in the declaration
            self.archetypes[label] = dict(partial)
        self.secondary: tuple[str, ...] = tuple(secondary)
        unknown = [n for n in self.secondary if n not in self._by_name]
        if unknown:
            raise ValueError(f"secondary knob(s) {', '.join(unknown)} not in the space")

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Knob:
        return self._by_name[name]

    def __iter__(self) -> Iterator[Knob]:
        return iter(self.knobs)

    @property
    def names(self) -> tuple[str, ...]:
        """Knob names in declaration order."""
        return tuple(k.name for k in self.knobs)

    @property
    def structured(self) -> bool:
        """Whether the space declares how to search it (weights, archetypes, secondary knobs)."""
        return bool(self.weights or self.archetypes or self.secondary)

    def default(self) -> Config:
        """Every knob at its default: the config a policy runs with when none is given, and
        the tuner's first trial."""
        return self.validate({})

    def is_active(self, knob: Knob, config: Mapping[str, Any]) -> bool:
        """Whether `knob` matters under `config` (a conditional knob matters only while its
        parent has one of the allowed values; a missing parent counts at its default)."""
        if knob.condition is None:
            return True
        parent, allowed = knob.condition
        return config.get(parent, self._by_name[parent].default) in allowed

    def validate(self, config: Mapping[str, Any]) -> Config:
        """Fill in defaults, coerce types and check ranges; unknown knobs are an error, and so
        is a pinned knob at another value."""
        unknown = sorted(set(config) - set(self._by_name))
        if unknown:
            raise ConfigError(
                f"unknown knob(s) {', '.join(unknown)}; known: {', '.join(self.names)}"
            )
        out: Config = {}
        for k in self.knobs:
            out[k.name] = k.coerce(config[k.name]) if k.name in config else k.default
            if k.name in self.pinned and out[k.name] != self.pinned[k.name]:
                raise ConfigError(f"knob {k.name!r}: held at {self.pinned[k.name]!r} in this search "
                                  f"(got {out[k.name]!r})")
        return out

    def parse_assignments(self, items: Iterable[str], base: Mapping[str, Any] | None = None) -> Config:
        """Apply ``knob=value`` strings (as typed on a command line) to `base`."""
        config = dict(base or {})
        for item in items:
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep or not name:
                raise ConfigError(f"{item!r} is not of the form knob=value")
            if name not in self._by_name:
                raise ConfigError(f"unknown knob {name!r}; known: {', '.join(self.names)}")
            config[name] = self._by_name[name].coerce(value.strip())
        return self.validate(config)

    def sample(self, rng: random.Random) -> Config:
        """A random valid config, each knob drawn on its own scale within the range a search
        covers (pinned knobs at their values): for tests and random search."""
        return self.validate({k.name: k.sample(rng) for k in self.knobs if k.name not in self.pinned})

    def active(self, config: Mapping[str, Any]) -> Config:
        """The knobs of `config` that matter (conditional knobs whose parent allows them)."""
        return {k.name: config[k.name] for k in self.knobs if self.is_active(k, config)}

    def restrict(self, sub: "Subspace") -> "ConfigSpace":
        """The part of this space `sub` describes: its pinned knobs held at their values (their
        default), its bounded knobs cut to their bounds (and their search ranges with them), and
        its start values as the other knobs' defaults; a start value always stays inside its
        knob's range. The declarations (weights, archetypes, secondary) go along; `pinned` and
        `bounds` say what was restricted. Raises `ConfigError` for an unknown knob, a value the
        knob does not accept, or bounds on a knob that has no range."""
        pinned, bounds, start = sub.pinned_values(), sub.bound_ranges(), sub.start_values()
        unknown = sorted((set(pinned) | set(bounds) | set(start)) - set(self._by_name))
        if unknown:
            raise ConfigError(f"unknown knob(s) {', '.join(unknown)}; known: {', '.join(self.names)}")
        both = sorted(set(pinned) & (set(bounds) | set(start)))
        if both:
            raise ConfigError(f"knob(s) {', '.join(both)} both pinned and searched")
        knobs: list[Knob] = []
        for k in self.knobs:
            if k.name in pinned:
                held = k.coerce(pinned[k.name])
                knobs.append(replace(k, default=held, search=None) if isinstance(k, (Int, Float))
                             else replace(k, default=held))
            elif k.name in bounds or k.name in start:
                knobs.append(_narrowed(k, bounds.get(k.name), start.get(k.name)))
            else:
                knobs.append(k)
        space = ConfigSpace(knobs, secondary=self.secondary)
        # checked against the declared space (bounds may leave a weight without its 0)
        space.weights, space.weight_scale = self.weights, self.weight_scale
        space.archetypes = dict(self.archetypes)
        space.pinned = {n: space[n].default for n in self.names if n in pinned}
        space.bounds = {n: bounds[n] for n in self.names if n in bounds}
        return space


def _narrowed(knob: Knob, bounds: tuple[float, float] | None, start: Any) -> Knob:
    """`knob` cut to `bounds` (its range and its search range), with `start` (if given) inside
    both and as its default; without a start, the default moves into the new search range."""
    if not isinstance(knob, (Int, Float)):
        if bounds is not None:
            raise ConfigError(f"knob {knob.name!r}: bounds need a numeric knob, not {knob.describe()}")
        return replace(knob, default=knob.coerce(start))
    value = knob.coerce(start) if start is not None else None
    lo, hi = float(knob.low), float(knob.high)
    slo, shi = (float(x) for x in knob.searched())
    if bounds is not None:
        b0, b1 = float(bounds[0]), float(bounds[1])
        if not b0 <= b1:
            raise ConfigError(f"knob {knob.name!r}: bounds [{b0:g}, {b1:g}] are empty")
        lo, hi = max(lo, b0), min(hi, b1)
        slo, shi = max(slo, b0), min(shi, b1)
    if isinstance(knob, Int):
        lo, hi, slo, shi = math.ceil(lo), math.floor(hi), math.ceil(slo), math.floor(shi)
    if value is not None:
        lo, hi = min(lo, value), max(hi, value)
        slo, shi = min(slo, value), max(shi, value)
    elif not lo <= hi:
        raise ConfigError(f"knob {knob.name!r}: bounds {bounds} leave none of [{knob.low}, {knob.high}]")
    slo, shi = max(slo, lo), min(shi, hi)
    if not slo <= shi:  # the bounds miss the search range: search what they leave
        slo, shi = lo, hi
    default = value if value is not None else min(max(knob.default, slo), shi)
    whole = (slo, shi) == (lo, hi)
    # a range of one value is searched on a linear scale: exp(log(x)) need not give x back
    log = knob.log and lo > 0 and slo < shi
    if isinstance(knob, Int):
        return replace(knob, low=int(lo), high=int(hi), default=int(default), log=log,
                       search=None if whole else (int(slo), int(shi)))
    return replace(knob, low=float(lo), high=float(hi), default=float(default), log=log,
                   search=None if whole else (float(slo), float(shi)))


@dataclass(frozen=True)
class Subspace:
    """The part of a policy's knob space one search covers (`ConfigSpace.restrict`): knobs held
    at one value (`pinned`), knobs searched only within a range (`bounds`), and the values the
    search starts from for the others (`start`). Sorted tuples of plain values: it is part of a
    search's settings, compared, hashed and written as JSON with them."""

    pinned: tuple[tuple[str, Any], ...] = ()
    bounds: tuple[tuple[str, float, float], ...] = ()
    start: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, pinned: Mapping[str, Any] | None = None,
           bounds: Mapping[str, tuple[float, float]] | None = None,
           start: Mapping[str, Any] | None = None) -> "Subspace":
        return cls(tuple(sorted((pinned or {}).items())),
                   tuple(sorted((n, float(lo), float(hi)) for n, (lo, hi) in (bounds or {}).items())),
                   tuple(sorted((start or {}).items())))

    def pinned_values(self) -> dict[str, Any]:
        return dict(self.pinned)

    def bound_ranges(self) -> dict[str, tuple[float, float]]:
        return {n: (lo, hi) for n, lo, hi in self.bounds}

    def start_values(self) -> dict[str, Any]:
        return dict(self.start)

    def config(self) -> dict[str, Any]:
        """The config the search starts from, as far as the subspace names it: start values and
        pinned values."""
        return {**self.start_values(), **self.pinned_values()}

    def with_pins(self, values: Mapping[str, Any]) -> "Subspace":
        """This subspace with the knobs of `values` pinned at them (no longer bounded or
        started elsewhere)."""
        if not values:
            return self
        return Subspace.of({**self.pinned_values(), **values},
                           {n: r for n, r in self.bound_ranges().items() if n not in values},
                           {n: v for n, v in self.start_values().items() if n not in values})


def dump_config(policy: str, config: Mapping[str, Any]) -> str:
    """The JSON form of a config file: ``{"policy": NAME, "knobs": {...}}``."""
    return json.dumps({"policy": policy, "knobs": dict(config)}, indent=2, sort_keys=False)


def parse_config_json(text: str, source: str = "config") -> tuple[str | None, dict[str, Any]]:
    """Read a config file's JSON; returns (policy name or None, knob values)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{source}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise ConfigError(f"{source}: JSON nested too deeply to be a config") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object")
    if "knobs" in data:
        knobs = data["knobs"]
        policy = data.get("policy")
    else:  # a bare {knob: value} object is accepted too
        knobs, policy = data, None
    if not isinstance(knobs, dict):
        raise ConfigError(f"{source}: 'knobs' must be a JSON object")
    if policy is not None and not isinstance(policy, str):
        raise ConfigError(f"{source}: 'policy' must be a policy name (a string), got {policy!r}")
    return policy, knobs


def read_config_file(path: str | os.PathLike[str]) -> tuple[str | None, dict[str, Any]]:
    """A config file (as `dump_config` writes): (policy name or None, knob values), with one clear
    error for a missing, unreadable, non-UTF-8 or non-JSON file."""
    if os.path.exists(path) and not os.path.isdir(path):
        try:
            check_input(path, "JSON config")  # a FIFO would block
        except InputError as e:
            raise ConfigError(str(e)) from None
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start}); expected a JSON config") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file ({e.strerror or e})") from None
    return parse_config_json(text, str(path))
