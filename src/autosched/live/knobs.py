"""How the knobs a live Slurm agent manages are written to and read from Slurm.

Which knobs are managed (the allowlist) and the part of the knob space a live round searches
are decided in `autosched.export.live` (shared with the replay experiment); units are converted
by `autosched.export.slurm` (the project's one converter). This module maps whole configs to
Slurm settings and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..export.live import (
    ALLOWED,
    BACKFILL_PREFIX,
    COMPOUND,
    NEVER,
    LiveKnobError,
    canonical,
    compound_parts,
    fixed_values,
    is_allowed,
    managed_knobs,
)
from ..export.slurm import from_slurm, quantize, to_slurm
from ..policies import get_policy
from ..space import Bool, Config, ConfigError, Knob
from ..trace.slurm import slurm_seconds
from .errors import LiveError, UnreadableValue

__all__ = ["ALLOWED", "BACKFILL_PREFIX", "COMPOUND", "NEVER", "LiveSpace", "canonical", "compound_parts",
           "is_allowed", "live_space", "same_value"]


def _entries(text: str | None) -> dict[str, str]:
    """``CPU=1000,GRES/gpu=2000`` -> {"cpu": "1000", "gres/gpu": "2000"} (keys lower-cased)."""
    if text is None or text.strip().lower() in ("", "(null)", "none"):
        return {}
    pairs = (item.strip().partition("=") for item in text.split(","))
    return {k.strip().lower(): v.strip() for k, _, v in pairs if k.strip()}


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
                    raise UnreadableValue(f"{where}: {parts[0]}: {e}") from None
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
                raise UnreadableValue(f"{where}: {e}") from None
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
    Raises `LiveError` when the policy has nothing to manage or a fixed value is not a non-live
    knob's."""
    try:
        return LiveSpace(policy, managed_knobs(policy), fixed_values(policy, fixed))
    except LiveKnobError as e:
        raise LiveError(str(e)) from None


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
