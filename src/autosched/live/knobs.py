"""Which knobs of a simulated policy the agent may set on a live Slurm cluster, and how.

A knob is *managed* when it is in the policy's `ConfigSpace` and its name is on the allowlist:
the multifactor priority settings that ``scontrol reconfigure`` applies without a restart, and
the backfill ``bf_*`` entries of ``SchedulerParameters``. Every other knob of the policy (e.g.
``backfill``, which would be ``SchedulerType``) is a *fixed* property in live mode: the tuner
sees it pinned at one value and the agent never writes it. Settings that need a daemon restart
or can lose jobs or history are never written, whatever the policy declares (`NEVER`).

Units are converted by `autosched.export.slurm` (the project's one converter); this module only
decides what is managed and maps whole configs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..export.slurm import from_slurm, quantize, to_slurm
from ..policies import Policy, get_policy
from ..space import Bool, Categorical, Config, ConfigError, ConfigSpace, Float, Int, Knob
from ..trace.slurm import slurm_seconds
from .errors import LiveError

ALLOWED = ("PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairshare",
           "PriorityWeightJobSize", "PriorityWeightPartition", "PriorityWeightQOS",
           "PriorityWeightTRES", "PriorityMaxAge", "PriorityDecayHalfLife", "PriorityFavorSmall",
           "PriorityCalcPeriod")
BACKFILL_PREFIX = "bf_"
# Never written, even if a policy had a knob of that name: they need a restart of slurmctld, or
# lose jobs (SelectType, partitions) or fair-share history (PriorityUsageResetPeriod).
NEVER = ("SchedulerType", "SelectType", "SelectTypeParameters", "PriorityType", "PriorityFlags",
         "PriorityUsageResetPeriod", "AccountingStorageEnforce", "PartitionName", "NodeName",
         "MaxJobCount", "ProctrackType", "StateSaveLocation")
_ALLOWED_LOWER = {n.lower(): n for n in ALLOWED}
# Settings whose value is a list of KEY=VALUE entries, one knob per entry, named SETTING.KEY in
# the policy's space (``PriorityWeightTRES.GRES/gpu``): they are written as one setting.
COMPOUND = ("PriorityWeightTRES",)


def compound_parts(name: str) -> tuple[str, str] | None:
    """(setting, key) of a compound knob's name, None for a plain one."""
    setting, dot, key = name.partition(".")
    return (setting, key) if dot and setting in COMPOUND and key else None


def is_allowed(name: str) -> bool:
    """Whether the agent may write the setting `name` (case as in slurm.conf, which ignores it)."""
    if name.lower() in {n.lower() for n in NEVER}:
        return False
    if compound_parts(name) is not None:
        return True
    return name.lower() in _ALLOWED_LOWER or name.startswith(BACKFILL_PREFIX)


def _entries(text: str | None) -> dict[str, str]:
    """``CPU=1000,GRES/gpu=2000`` -> {"cpu": "1000", "gres/gpu": "2000"} (keys lower-cased)."""
    if text is None or text.strip().lower() in ("", "(null)", "none"):
        return {}
    pairs = (item.strip().partition("=") for item in text.split(","))
    return {k.strip().lower(): v.strip() for k, _, v in pairs if k.strip()}


def canonical(name: str) -> str:
    """The allowlist's spelling of a setting (``scontrol`` prints PriorityWeightFairShare)."""
    return _ALLOWED_LOWER.get(name.lower(), name)


@dataclass(frozen=True)
class LiveSpace:
    """One policy's knobs split into managed (written live) and fixed (pinned in live mode)."""

    policy: str
    managed: tuple[Knob, ...]
    fixed: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.managed)

    def knob(self, name: str) -> Knob:
        for k in self.managed:
            if k.name == name:
                return k
        raise KeyError(name)

    def to_settings(self, config: Mapping[str, Any]) -> dict[str, str]:
        """The managed knobs of `config` as Slurm settings (name -> text; a true bf_ flag is
        ``""``, a false one is left out)."""
        out: dict[str, str] = {}
        for k in self.managed:
            parts = compound_parts(k.name)
            if parts is not None:
                entry = f"{parts[1]}={to_slurm(k, config[k.name])}"
                out[parts[0]] = f"{out[parts[0]]},{entry}" if parts[0] in out else entry
                continue
            if k.name.startswith(BACKFILL_PREFIX) and isinstance(k, Bool):
                if k.coerce(config[k.name]):
                    out[k.name] = ""
                continue
            out[k.name] = to_slurm(k, config[k.name])
        return out

    def knob_texts(self, config: Mapping[str, Any]) -> dict[str, str]:
        """Each managed knob's value as Slurm spells it, by knob name (a compound knob gives its
        entry's value, a bf_ flag YES or NO): what an operator compares with slurm.conf."""
        return {k.name: to_slurm(k, config[k.name]) for k in self.managed}

    def effective(self, name: str, live: Mapping[str, str]) -> str | None:
        """The text of setting `name` in `live`, or what Slurm uses when it is absent: its
        default for a valued bf_ entry (Slurm shows only the entries that are set)."""
        got = {n.lower(): v for n, v in live.items()}.get(name.lower())
        if got is None and name.startswith(BACKFILL_PREFIX):
            k = self.knob(name)
            return None if isinstance(k, Bool) else to_slurm(k, k.default)
        return got

    def from_settings(self, live: Mapping[str, str], where: str = "scontrol show config") -> Config:
        """The managed knobs' values from Slurm settings. A managed setting Slurm does not show is
        an error (the agent cannot know what it would overwrite)."""
        lower = {n.lower(): v for n, v in live.items()}
        out: Config = {}
        for k in self.managed:
            parts = compound_parts(k.name)
            if parts is not None:  # an entry Slurm does not list has weight 0
                text = _entries(lower.get(parts[0].lower())).get(parts[1].lower(), "0")
                try:
                    out[k.name] = from_slurm(k, text)
                except ConfigError as e:
                    raise LiveError(f"{where}: {parts[0]}: {e}") from None
                continue
            if k.name.startswith(BACKFILL_PREFIX) and isinstance(k, Bool):
                out[k.name] = k.name.lower() in lower
                continue
            if k.name.lower() not in lower:
                if k.name.startswith(BACKFILL_PREFIX):
                    out[k.name] = k.default  # Slurm's default applies when the entry is absent
                    continue
                raise LiveError(f"{where}: no value for {k.name}")
            try:
                out[k.name] = from_slurm(k, lower[k.name.lower()])
            except ConfigError as e:
                raise LiveError(f"{where}: {e}") from None
        return out

    def quantized(self, config: Mapping[str, Any]) -> Config:
        """The managed part of `config` as Slurm will hold it (times in whole minutes)."""
        return {k.name: quantize(k, config[k.name]) for k in self.managed}

    def full(self, managed: Mapping[str, Any]) -> Config:
        """A whole policy config: the managed values plus the fixed ones."""
        return get_policy(self.policy).space.validate({**self.fixed, **{
            n: managed[n] for n in self.names if n in managed}})


def live_space(policy: str, fixed: Mapping[str, Any] | None = None) -> LiveSpace:
    """Split `policy`'s knobs; `fixed` gives values to the non-managed ones (default: defaults).
    Raises `LiveError` when the policy has nothing to manage."""
    space = get_policy(policy).space
    managed = tuple(k for k in space if is_allowed(k.name))
    if not managed:
        raise LiveError(f"policy {policy!r} has no knob with a live Slurm setting (the live "
                        f"settings are {', '.join(ALLOWED)} and bf_* SchedulerParameters)")
    fixed = dict(fixed or {})
    bad = [n for n in fixed if n not in space or is_allowed(n)]
    if bad:
        raise LiveError(f"cannot fix {', '.join(bad)}: not a non-live knob of {policy}")
    values = space.validate(fixed)
    return LiveSpace(policy, managed, {k.name: values[k.name] for k in space if not is_allowed(k.name)})


def same_value(name: str, a: str | None, b: str | None) -> bool:
    """Whether two Slurm texts of setting `name` mean the same (``7-0`` = ``7-00:00:00``,
    ``YES`` = ``Yes``, ``00:01:00`` = ``1`` for PriorityCalcPeriod)."""
    if name in COMPOUND or name.lower() in (c.lower() for c in COMPOUND):
        ea, eb = _entries(a), _entries(b)  # an entry of weight 0 is the same as none
        keys = set(ea) | set(eb)
        return all(same_value("", ea.get(key, "0"), eb.get(key, "0")) for key in keys)
    if a is None or b is None:
        return a is b
    a, b = a.strip(), b.strip()
    if a.lower() == b.lower():
        return True
    if name.lower() in ("prioritymaxage", "prioritydecayhalflife", "prioritycalcperiod"):
        sa, sb = slurm_seconds(a), slurm_seconds(b)
        return sa is not None and sa == sb
    try:
        return float(a) == float(b)
    except ValueError:
        return False


# -- the tuner's view in live mode ----------------------------------------------------------

@dataclass(frozen=True)
class Pinned(Categorical):
    """A knob held at one value in live mode: the tuner can only pick that value, and the
    original knob still checks it. (A one-choice categorical, so that every part of the tuner
    that maps knobs - Optuna distributions, Latin hypercube - handles it unchanged.)"""

    original: Knob | None = field(default=None, compare=False)

    def coerce(self, value: Any) -> Any:
        v = self.original.coerce(value) if self.original is not None else value
        if v != self.default:
            raise ConfigError(f"knob {self.name!r}: fixed at {self.default!r} in live mode")
        return v


def pin(knob: Knob, value: Any) -> Pinned:
    value = knob.coerce(value)
    # the unit goes along: the Slurm converters read it (a pinned PriorityMaxAge is still 7-0)
    return Pinned(knob.name, knob.help, choices=(value,), default=value, original=knob,
                  unit=knob.unit)


def narrowed(knob: Knob, running: Any, bounds: tuple[float, float] | None,
             max_step: float | None) -> Knob:
    """`knob` with its range cut to `bounds` and to `max_step` (a fraction of the range, or of
    its log range for log-scaled knobs) around the running value, which always stays inside."""
    if not isinstance(knob, (Int, Float)):
        return knob
    lo, hi = float(knob.low), float(knob.high)
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    if max_step is not None:
        if knob.log and knob.low > 0 and running > 0:
            f = math.exp(max_step * math.log(knob.high / knob.low))
            lo, hi = max(lo, running / f), min(hi, running * f)
        else:
            d = max_step * (knob.high - knob.low)
            lo, hi = max(lo, running - d), min(hi, running + d)
    lo, hi = min(lo, running), max(hi, running)
    if isinstance(knob, Int):
        lo, hi = math.ceil(lo), math.floor(hi)
        lo, hi = min(lo, running), max(hi, running)
        return replace(knob, low=int(lo), high=int(hi), log=knob.log and lo > 0,
                       default=int(min(max(knob.default, lo), hi)))
    # a default the cut range leaves out moves to its nearer end (a knob's default must be valid)
    return replace(knob, low=lo, high=hi, log=knob.log and lo > 0,
                   default=min(max(knob.default, lo), hi))


def live_policy(ls: LiveSpace, running: Mapping[str, Any],
                bounds: Mapping[str, tuple[float, float]] | None = None,
                max_step: float | None = None) -> type[Policy]:
    """The policy class the tuner searches in live mode: same name and behaviour, fixed knobs
    pinned, managed knobs cut to their bounds (and, in auto mode, to one step of the running
    value). Every config of it is a valid config of the original policy."""
    base = get_policy(ls.policy)
    bounds = dict(bounds or {})
    knobs: list[Knob] = []
    for k in base.space:
        if k.name in ls.fixed:
            knobs.append(pin(k, ls.fixed[k.name]))
        else:
            knobs.append(narrowed(k, running[k.name], bounds.get(k.name), max_step))
    return type(base.__name__, (base,), {"space": ConfigSpace(knobs), "__module__": __name__})
