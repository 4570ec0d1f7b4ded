"""Scheduling policies. Each declares its knobs in a `ConfigSpace`; `POLICIES` is the registry of
the built-in ones, and `get_policy` the one place a policy is found by what a user typed: a
built-in name, the name of an installed plugin's entry point, or ``module:Class``."""

from __future__ import annotations

import importlib
import math
import re
from typing import TYPE_CHECKING

from ..errors import InputError
from .base import PLACEMENT, Policy
from .fifo import Fifo
from .multifactor import Multifactor
from .qssf import Qssf
from .sjf import Sjf
from .srtf import Srtf
from .tiresias import Tiresias

if TYPE_CHECKING:  # importlib.metadata is imported when a plugin is looked for (~50 ms cold)
    from importlib.metadata import EntryPoint

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (Fifo, Sjf, Srtf, Tiresias, Qssf, Multifactor)
}

# The entry-point group a package declares its policies in (pyproject.toml:
# [project.entry-points."autosched.policies"] NAME = "package.module:Class"; NAME = the class's `name`).
ENTRY_POINT_GROUP = "autosched.policies"

_SPEC = re.compile(r"(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


class UnknownPolicy(InputError):
    """A policy name that is neither built in, nor an installed entry point, nor ``module:Class``."""

    pass


class PolicyLoadError(InputError):
    """A plugin policy that was found but cannot be used: its module or class is missing, it fails
    to import, or what it names is not a `Policy` subclass."""

    pass


def get_policy(name: str) -> type[Policy]:
    """The policy class `name` stands for: a built-in policy (`POLICIES`), an entry point of group
    ``autosched.policies``, or ``package.module:Class`` (the module must be importable: installed,
    or on PYTHONPATH). Raises UnknownPolicy or PolicyLoadError (InputErrors) with one line."""
    cls = POLICIES.get(name)
    if cls is not None:
        return cls
    if ":" in name:
        return _load_spec(name)
    points = _entry_points()
    if name not in points:
        raise UnknownPolicy(f"unknown policy {name!r}; known: {', '.join(dict.fromkeys([*POLICIES, *points]))}, "
                            "or MODULE:CLASS (e.g. mypkg.policies:Shortest)")
    return _load_entry_point(_one(name, points[name]))


def policy_identity(cls: type[Policy]) -> str:
    """What a stored result (a study, an oracle cache entry) names `cls` by: a built-in policy by
    its name, a plugin by its name, module and class (two plugins may share a name)."""
    if POLICIES.get(cls.name) is cls:
        return cls.name
    return f"{cls.name}={cls.__module__}:{cls.__qualname__}"


def available_policies() -> dict[str, type[Policy]]:
    """Every policy a name can select, by name: the built-in ones, then the installed entry
    points' (each loaded and checked: a broken one raises PolicyLoadError)."""
    found = dict(POLICIES)
    for name, group in _entry_points().items():
        point = _one(name, group)
        if name in POLICIES:
            raise PolicyLoadError(f"{_where(point)} has the name of a built-in policy; rename it")
        found[name] = _load_entry_point(point)
    return found


def _entry_points() -> dict[str, list[EntryPoint]]:
    """The group's entry points by name; two distributions may declare the same name."""
    from importlib.metadata import entry_points

    out: dict[str, list[EntryPoint]] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        same = out.setdefault(point.name, [])
        if all(p.value != point.value for p in same):
            same.append(point)
    return out


def _one(name: str, points: list[EntryPoint]) -> EntryPoint:
    """The one entry point named `name`; two that name different classes are an error naming
    both (which one Python finds first depends on the order of sys.path)."""
    if len(points) > 1:
        shown = "; ".join(f"{p.value!r} in {_dist(p)}" for p in points)
        raise PolicyLoadError(f"entry point {name!r} (group {ENTRY_POINT_GROUP!r}) is declared by "
                              f"{len(points)} installed packages: {shown}; uninstall one, or name "
                              "the class as MODULE:CLASS")
    return points[0]


def _dist(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f"distribution {dist.name!r}" if dist is not None else "an unknown distribution"


def _where(point: EntryPoint) -> str:
    return f"entry point {point.name!r} = {point.value!r} (group {ENTRY_POINT_GROUP!r})"


def _load_entry_point(point: EntryPoint) -> type[Policy]:
    where = _where(point)
    try:
        obj = point.load()
    except (Exception, SystemExit) as exc:  # the plugin's own code: any failure is one line
        raise PolicyLoadError(f"{where} fails to import: {type(exc).__name__}: {exc}") from exc
    cls = _checked(obj, where)
    if cls.name != point.name:
        raise PolicyLoadError(f"{where}: its class is named {cls.name!r}; the entry point must carry the "
                              "policy's name (what config files and reports call it)")
    return cls


def _load_spec(spec: str) -> type[Policy]:
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise UnknownPolicy(f"policy {spec!r}: expected MODULE:CLASS, e.g. mypkg.policies:Shortest")
    module_name, attr = m["module"], m["attr"]
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):  # the module itself is missing
            raise PolicyLoadError(f"policy {spec!r}: no module named {module_name!r} "
                                  "(install it, or put its directory on PYTHONPATH)") from exc
        raise PolicyLoadError(f"policy {spec!r}: importing {module_name} fails: {exc}") from exc
    except (Exception, SystemExit) as exc:  # the plugin's own code: any failure is one line
        raise PolicyLoadError(f"policy {spec!r}: importing {module_name} fails: {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PolicyLoadError(f"policy {spec!r}: module {module_name} has no {attr!r}") from None
    cls = _checked(obj, f"policy {spec!r}")
    if cls.name in POLICIES and POLICIES[cls.name] is not cls:
        raise PolicyLoadError(f"policy {spec!r}: its name {cls.name!r} is a built-in policy's; a "
                              "config file or report naming it would mean the built-in one: rename it")
    return cls


_NAME = re.compile(r"[A-Za-z][\w.-]{0,63}")


def _checked(obj: object, where: str) -> type[Policy]:
    """`obj` if it is a usable policy class, else PolicyLoadError: a `Policy` subclass whose
    ``name`` is a short word (what config files and reports call it), whose ``summary`` is text
    and whose ``space`` is a `ConfigSpace` with the placement knob and finite bounds on every
    number."""
    from ..space import ConfigSpace, Float, Int

    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise PolicyLoadError(f"{where}: {obj!r} is not a subclass of autosched.policies.Policy")
    missing = [attr for attr in ("name", "summary", "space") if not hasattr(obj, attr)]
    if missing:
        raise PolicyLoadError(f"{where}: {obj.__name__} does not declare {', '.join(missing)} (see docs/extending.md)")
    bad = f"{where}: {obj.__name__}"
    if not isinstance(obj.name, str) or not _NAME.fullmatch(obj.name):
        raise PolicyLoadError(f"{bad}.name is {obj.name!r}: a policy's name is a word of letters, "
                              "digits, '_', '.' or '-' (at most 64, a letter first)")
    if not isinstance(obj.summary, str):
        raise PolicyLoadError(f"{bad}.summary is {obj.summary!r}: one line of text")
    if not isinstance(obj.space, ConfigSpace):
        raise PolicyLoadError(f"{bad}.space is {type(obj.space).__name__}, not an "
                              "autosched.space.ConfigSpace")
    if "placement" not in obj.space.names:
        raise PolicyLoadError(f"{bad}.space has no placement knob: every policy declares "
                              "autosched.policies.PLACEMENT (see docs/extending.md)")
    for knob in obj.space:
        if isinstance(knob, (Float, Int)) and not all(
                math.isfinite(float(v)) for v in (knob.low, knob.high, knob.default)):
            raise PolicyLoadError(f"{bad}.space: knob {knob.name!r} has range [{knob.low}, "
                                  f"{knob.high}] and default {knob.default}; both bounds and the "
                                  "default must be finite")
    return obj


__all__ = ["Policy", "POLICIES", "PLACEMENT", "ENTRY_POINT_GROUP", "get_policy", "available_policies",
           "policy_identity",
           "UnknownPolicy", "PolicyLoadError"]
