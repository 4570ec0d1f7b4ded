"""``slurm.conf`` lines for a ``multifactor`` config.

Every knob of `Multifactor` is named after its ``slurm.conf`` parameter; this module only
converts units (seconds to Slurm time strings, booleans to YES/NO) and says, in comment lines,
which knobs Slurm has no parameter for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..policies.multifactor import CLASSIC, CPU_BILL, CPU_TRES, GPU_BILL, GPU_TRES, Multifactor
from ..space import Bool, ConfigError, Int, Knob
from ..trace.slurm import slurm_seconds  # the one parser of Slurm times


def slurm_time(seconds: float) -> str:
    """A duration as a Slurm time string: ``D-0`` for whole days, else ``D-HH:MM:00``.

    Slurm keeps these parameters in whole minutes, so the value is rounded to the minute.
    """
    minutes = int(round(seconds / 60.0))
    days, rest = divmod(minutes, 1440)
    if rest == 0:
        return f"{days}-0"
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00"


def slurm_conf_lines(config: Mapping[str, Any]) -> list[str]:
    """The ``slurm.conf`` lines that configure Slurm as `config` (a multifactor config; missing
    knobs take their defaults) was simulated. Raises `ConfigError` for an invalid config.

    ``PriorityWeightTRES`` names ``GRES/gpu``, which Slurm accepts only with
    ``AccountingStorageTRES=gres/gpu`` (and so slurmdbd). ``TRESBillingWeights`` belongs on the
    partition lines; it is given as a comment to copy there (``scontrol update`` sets it live).
    """
    c = Multifactor.space.validate(config)
    lines = [
        "PriorityType=priority/multifactor",
        "PriorityFlags=NO_FAIR_TREE" if c["PriorityFlags"] == CLASSIC
        else "# PriorityFlags without NO_FAIR_TREE: Fair Tree, Slurm's default",
        f"PriorityWeightAge={c['PriorityWeightAge']}",
        f"PriorityMaxAge={slurm_time(c['PriorityMaxAge'])}",
        f"PriorityWeightFairshare={c['PriorityWeightFairshare']}",
        f"PriorityDecayHalfLife={slurm_time(c['PriorityDecayHalfLife'])}",
        f"PriorityWeightJobSize={c['PriorityWeightJobSize']}",
        f"PriorityFavorSmall={'YES' if c['PriorityFavorSmall'] else 'NO'}",
        f"PriorityWeightTRES=CPU={c[CPU_TRES]},GRES/gpu={c[GPU_TRES]}",
        f"PriorityCalcPeriod={c['PriorityCalcPeriod']}",
        f"SchedulerType={'sched/backfill' if c['backfill'] else 'sched/builtin'}",
        f"SchedulerParameters={scheduler_parameters(c)}",
        f"# PartitionName=... TRESBillingWeights=\"CPU={c[CPU_BILL]:g},GRES/gpu={c[GPU_BILL]:g}\"",
        f"# placement={c['placement']}: simulator setting; Slurm's select plugin places jobs",
    ]
    if c["backfill"]:
        lines.append(f"# reserve_after={c['reserve_after']:g} s: used only for traces without time limits "
                     "(Slurm's backfill reserves by job time limits)")
    return lines


def scheduler_parameters(config: Mapping[str, Any]) -> str:
    """The ``SchedulerParameters`` value of a (validated) multifactor config."""
    c = config
    parts = []
    if c["backfill"]:
        parts += [f"bf_interval={c['bf_interval']}", f"bf_window={c['bf_window']}",
                  f"bf_max_job_test={c['bf_max_job_test']}", f"bf_resolution={c['bf_resolution']}"]
        if c["bf_continue"]:
            parts.append("bf_continue")
    parts += [f"sched_interval={c['sched_interval']}", f"default_queue_depth={c['default_queue_depth']}",
              f"batch_sched_delay={c['batch_sched_delay']}"]
    return ",".join(parts)


# -- one knob at a time, both ways (the live agent writes and reads these) -------------------
# A knob's unit says how Slurm spells it: "s" -> a Slurm time string, "min" -> whole minutes in
# slurm.conf (scontrol shows them as a time), booleans -> YES/NO; everything else as a number.

def to_slurm(knob: Knob, value: Any) -> str:
    """`value` of `knob` as slurm.conf spells it (``PriorityMaxAge=7-0``: the part after ``=``)."""
    value = knob.coerce(value)
    if isinstance(knob, Bool):
        return "YES" if value else "NO"
    unit = knob.unit
    if unit == "s":
        return slurm_time(value)
    if unit == "min" or isinstance(knob, Int):
        return str(int(round(value)))
    return f"{value:g}" if isinstance(value, float) else str(value)


def from_slurm(knob: Knob, text: str) -> Any:
    """The value of `knob` from Slurm's text of it (slurm.conf or ``scontrol show config``,
    which prints times as ``D-HH:MM:SS`` and booleans as Yes/No). Raises `ConfigError` when the
    text is not a value of the knob."""
    text = text.strip()
    if isinstance(knob, Bool):
        return knob.coerce(text)
    unit = knob.unit
    if unit in ("s", "min"):
        seconds = slurm_seconds(text)
        if seconds is None:
            raise ConfigError(f"knob {knob.name!r}: {text!r} is not a Slurm time")
        return knob.coerce(seconds if unit == "s" else seconds / 60.0)
    return knob.coerce(text)


def quantize(knob: Knob, value: Any) -> Any:
    """The value Slurm will really hold for `value` (times are kept in whole minutes)."""
    return from_slurm(knob, to_slurm(knob, value))
