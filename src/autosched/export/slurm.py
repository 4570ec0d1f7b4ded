"""``slurm.conf`` lines for a ``multifactor`` config.

Every knob of `Multifactor` is named after its ``slurm.conf`` parameter; this module only
converts units (seconds to Slurm time strings, booleans to YES/NO) and says, in comment lines,
which knobs Slurm has no parameter for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..policies.multifactor import Multifactor


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
    knobs take their defaults) was simulated. Raises `ConfigError` for an invalid config."""
    c = Multifactor.space.validate(config)
    lines = [
        "PriorityType=priority/multifactor",
        "PriorityFlags=NO_FAIR_TREE",  # the classic fair-share factor, as simulated
        f"PriorityWeightAge={c['PriorityWeightAge']}",
        f"PriorityMaxAge={slurm_time(c['PriorityMaxAge'])}",
        f"PriorityWeightFairshare={c['PriorityWeightFairshare']}",
        f"PriorityDecayHalfLife={slurm_time(c['PriorityDecayHalfLife'])}",
        f"PriorityWeightJobSize={c['PriorityWeightJobSize']}",
        f"PriorityFavorSmall={'YES' if c['PriorityFavorSmall'] else 'NO'}",
        f"PriorityCalcPeriod={c['PriorityCalcPeriod']}",
        f"SchedulerType={'sched/backfill' if c['backfill'] else 'sched/builtin'}",
        f"# placement={c['placement']}: simulator setting; Slurm's select plugin places jobs",
    ]
    if c["backfill"]:
        lines.append(f"# reserve_after={c['reserve_after']:g} s: no slurm.conf counterpart "
                     "(Slurm's backfill reserves by job time limits)")
    return lines
