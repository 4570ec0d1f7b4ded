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
from dataclasses import dataclass, field
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
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def describe(self) -> str:
        scale = ", log scale" if self.log else ""
        unit = f" {self.unit}" if self.unit else ""
        return f"float in [{self.low:g}, {self.high:g}]{unit}{scale}"


@dataclass(frozen=True)
class Int(Knob):
    low: int = 0
    high: int = 1
    default: int = 0
    log: bool = False

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
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high + 1)))
            return min(self.high, int(x))
        return rng.randint(self.low, self.high)

    def describe(self) -> str:
        scale = ", log scale" if self.log else ""
        unit = f" {self.unit}" if self.unit else ""
        return f"int in [{self.low}, {self.high}]{unit}{scale}"


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
    """An ordered set of knobs. Validation of every config happens here and nowhere else."""

    def __init__(self, knobs: Iterable[Knob]):
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
        """Fill in defaults, coerce types and check ranges; unknown knobs are an error."""
        unknown = sorted(set(config) - set(self._by_name))
        if unknown:
            raise ConfigError(
                f"unknown knob(s) {', '.join(unknown)}; known: {', '.join(self.names)}"
            )
        out: Config = {}
        for k in self.knobs:
            out[k.name] = k.coerce(config[k.name]) if k.name in config else k.default
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
        """A random valid config, each knob drawn on its own scale (for tests and random search)."""
        return self.validate({k.name: k.sample(rng) for k in self.knobs})

    def active(self, config: Mapping[str, Any]) -> Config:
        """The knobs of `config` that matter (conditional knobs whose parent allows them)."""
        return {k.name: config[k.name] for k in self.knobs if self.is_active(k, config)}


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
