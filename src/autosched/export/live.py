"""The live knob space: which knobs of a policy a live Slurm agent may write, and the one function
that builds the part of the space a search covers when it tunes for a live cluster.

A knob is *managed* when it is in the policy's `ConfigSpace` and its name is on the allowlist:
the multifactor priority settings that ``scontrol reconfigure`` applies without a restart, and
the backfill ``bf_*`` entries of ``SchedulerParameters``. Every other knob of the policy (e.g.
``backfill``, which would be ``SchedulerType``) is *fixed* in live mode: pinned at the cluster's
value, never written. Settings that need a daemon restart or can lose jobs or history are never
written, whatever the policy declares (`NEVER`).

`live_subspace` is shared by the live agent (`autosched agent`) and the replay experiment
(``autosched run --live-knobs``), so that the replay predicts what the agent can really do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..policies import get_policy
from ..space import ConfigError, Float, Int, Knob, Subspace

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
_NEVER_LOWER = {n.lower() for n in NEVER}
# Settings whose value is a list of KEY=VALUE entries, one knob per entry, named SETTING.KEY in
# the policy's space (``PriorityWeightTRES.GRES/gpu``): they are written as one setting.
COMPOUND = ("PriorityWeightTRES",)


class LiveKnobError(ConfigError):
    """A live knob space that cannot be built: a policy without live knobs, a bad fixed value."""


def compound_parts(name: str) -> tuple[str, str] | None:
    """(setting, key) of a compound knob's name, None for a plain one."""
    setting, dot, key = name.partition(".")
    return (setting, key) if dot and setting in COMPOUND and key else None


def is_allowed(name: str) -> bool:
    """Whether the agent may write the setting `name` (case as in slurm.conf, which ignores it)."""
    if name.lower() in _NEVER_LOWER:
        return False
    if compound_parts(name) is not None:
        return True
    return name.lower() in _ALLOWED_LOWER or name.startswith(BACKFILL_PREFIX)


def canonical(name: str) -> str:
    """The allowlist's spelling of a setting (``scontrol`` prints PriorityWeightFairShare)."""
    return _ALLOWED_LOWER.get(name.lower(), name)


def managed_knobs(policy: str) -> tuple[Knob, ...]:
    """The knobs of `policy` the agent may write, in declaration order."""
    managed = tuple(k for k in get_policy(policy).space if is_allowed(k.name))
    if not managed:
        raise LiveKnobError(f"policy {policy!r} has no knob with a live Slurm setting (the live "
                            f"settings are {', '.join(ALLOWED)} and bf_* SchedulerParameters)")
    return managed


def fixed_values(policy: str, fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every non-live knob of `policy` at the cluster's value: `fixed` where given, else its
    default. Raises `LiveKnobError` for a knob that is not a non-live knob of the policy."""
    space = get_policy(policy).space
    managed_knobs(policy)
    fixed = dict(fixed or {})
    managed = [n for n in fixed if n in space and is_allowed(n)]
    if managed:
        # a managed knob has a Slurm setting: the agent searches it; to hold it, bound it
        n = managed[0]
        raise LiveKnobError(f"cannot fix {', '.join(managed)}: a knob with a live Slurm setting, "
                            f"which the agent manages; to keep the agent off it, bound it to one "
                            f"value ({n} in [V, V])")
    bad = [n for n in fixed if n not in space]
    if bad:
        can = ", ".join(k.name for k in space if not is_allowed(k.name))
        raise LiveKnobError(f"cannot fix {', '.join(bad)}: not a non-live knob of {policy} (the live "
                            f"knobs are searched; those that can be fixed: {can})")
    values = space.validate(fixed)
    return {k.name: values[k.name] for k in space if not is_allowed(k.name)}


def live_subspace(policy: str, fixed: Mapping[str, Any] | None = None,
                  running: Mapping[str, Any] | None = None,
                  bounds: Mapping[str, tuple[float, float]] | None = None,
                  max_step: float | None = None) -> Subspace:
    """The part of `policy`'s knob space a search for a live cluster covers: every non-live knob
    pinned at the cluster's value (`fixed_values`), every live knob searched from its `running`
    value (default: its default), within `bounds` (an operator's) and, with `max_step`, within
    that fraction of its searched range (of its log range for a log-scaled knob) around the
    running value, unless the step reaches the whole searched range (``max_step=1`` always does:
    the search is then that of propose mode). The running value stays inside, except outside an
    operator's bound: the search then starts from the bound's nearest end."""
    space = get_policy(policy).space
    pinned = fixed_values(policy, fixed)
    running = space.validate({**pinned, **(running or {})})
    bounds = dict(bounds or {})
    managed = managed_knobs(policy)
    unknown = sorted(set(bounds) - {k.name for k in managed})
    if unknown:
        raise LiveKnobError(f"bounds for {', '.join(unknown)}: not a live knob of {policy}")
    cut: dict[str, tuple[float, float]] = {}
    start = {k.name: running[k.name] for k in managed}
    for k in managed:
        b = bounds.get(k.name)
        if b is not None:
            # an operator's bound holds the search, also when the running value is outside
            # it: the search starts from the nearest value inside, never from the running one
            start[k.name] = k.coerce(min(max(running[k.name], b[0]), b[1]))
        if max_step is not None and isinstance(k, (Int, Float)) and not _covers(k, running[k.name], max_step):
            step = _step(k, running[k.name], max_step)
            # the step from the running value, inside the bound; when the two do not meet, the
            # bound's nearest end (a bound is the operator's rule, the step the agent's pace)
            b = step if b is None else (max(b[0], step[0]), min(b[1], step[1])) \
                if max(b[0], step[0]) <= min(b[1], step[1]) else (start[k.name], start[k.name])
        if b is not None:
            cut[k.name] = (float(b[0]), float(b[1]))
    return Subspace.of(pinned=pinned, bounds=cut, start=start)


def _covers(knob: Int | Float, running: float, max_step: float) -> bool:
    """Whether a step of `max_step` from `running` reaches the whole of the knob's searched range
    (the step then restricts nothing, and a bound would only turn the weights' direction search
    off: `SearchSpace.weight_group`). Distances are compared, not rebuilt ends, so that a step of
    1 covers a log-scaled knob at either end of its range despite rounding."""
    lo, hi = _searched(knob, running)
    if knob.log and lo > 0 and running > 0:
        reach, need = max_step * math.log(hi / lo), max(math.log(running / lo), math.log(hi / running))
    else:
        reach, need = max_step * (hi - lo), max(running - lo, hi - running)
    return reach >= need * (1 - 1e-12)


def _step(knob: Int | Float, running: float, max_step: float) -> tuple[float, float]:
    """[running - step, running + step]: `max_step` of the knob's searched range (a factor of its
    log range around the running value, for a log-scaled knob)."""
    lo, hi = _searched(knob, running)
    if knob.log and lo > 0 and running > 0:
        f = math.exp(max_step * math.log(hi / lo))
        return running / f, running * f
    d = max_step * (hi - lo)
    return running - d, running + d


def _searched(knob: Int | Float, running: float) -> tuple[float, float]:
    """The knob's searched range widened to hold `running`, as a search that starts there
    searches it (`Subspace`: the start config always stays inside)."""
    lo, hi = (float(x) for x in knob.searched())
    return min(lo, running), max(hi, running)
