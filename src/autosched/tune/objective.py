"""What the tuner optimises: one `Metrics` field, a direction, constraints, and how several
workloads combine into one number."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InputError
from ..sim.metrics import METRIC_HELP, Metrics

COMBINES = ("mean", "worst")
Direction = Literal["minimize", "maximize"]
DIRECTIONS: dict[str, Direction] = {"minimize": "minimize", "maximize": "maximize"}
_CONSTRAINT = re.compile(r"^\s*([a-z_0-9]+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


class ObjectiveError(InputError):
    """An objective or constraint that cannot be understood."""


@dataclass(frozen=True)
class Constraint:
    """``metric <= bound`` or ``metric >= bound``, checked on the workloads' combined value."""

    metric: str
    op: str
    bound: float

    @classmethod
    def parse(cls, text: str) -> "Constraint":
        m = _CONSTRAINT.match(text)
        if not m:
            raise ObjectiveError(f"constraint {text!r}: expected METRIC<=VALUE or METRIC>=VALUE "
                                 "(e.g. 'p99_queue<=21600')")
        metric, op, bound = m.group(1), m.group(2), m.group(3)
        _check_metric(metric, f"constraint {text!r}")
        try:
            value = float(bound)
        except ValueError:
            raise ObjectiveError(f"constraint {text!r}: {bound!r} is not a number") from None
        return cls(metric, op, value)

    def violation(self, metrics: Sequence[Metrics], combine: str) -> float:
        """How far the constraint is broken (<= 0 means satisfied), as Optuna's constraints_func wants.

        With ``combine="worst"`` the worst workload must satisfy it; with ``"mean"`` the mean."""
        values = [float(getattr(m, self.metric)) for m in metrics]
        if combine == "worst":
            v = max(values) if self.op == "<=" else min(values)
        else:
            v = sum(values) / len(values)
        return v - self.bound if self.op == "<=" else self.bound - v

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"


@dataclass(frozen=True, init=False)
class Objective:
    """A `Metrics` field to minimise or maximise over a set of workloads.

    ``direction=None`` takes the metric's natural direction from ``METRIC_HELP`` (less JCT is
    better, more utilisation is better). ``combine="worst"`` scores a config by its worst workload.
    Constraints may be given as text (``"avg_queue<=600"``) and are kept parsed.
    """

    metric: str
    direction: Direction
    constraints: tuple[Constraint, ...]
    combine: str

    def __init__(self, metric: str = "avg_jct", direction: str | None = None,
                 constraints: Sequence[str | Constraint] = (), combine: str = "mean") -> None:
        _check_metric(metric, "objective")
        natural = "minimize" if METRIC_HELP[metric][1] else "maximize"
        chosen = DIRECTIONS.get(natural if direction is None else direction)
        if chosen is None:
            raise ObjectiveError(f"direction {direction!r}: use minimize or maximize")
        if combine not in COMBINES:
            raise ObjectiveError(f"combine {combine!r}: use one of {', '.join(COMBINES)}")
        parsed = tuple(c if isinstance(c, Constraint) else Constraint.parse(c) for c in constraints)
        # (frozen: the fields are set once, here)
        object.__setattr__(self, "metric", metric)
        object.__setattr__(self, "direction", chosen)
        object.__setattr__(self, "constraints", parsed)
        object.__setattr__(self, "combine", combine)

    @property
    def minimize(self) -> bool:
        return self.direction == "minimize"

    def value(self, metrics: Sequence[Metrics]) -> float:
        """The objective of one config over its workloads (mean, or the worst one)."""
        if not metrics:
            raise ObjectiveError("no workloads to score")
        values = [float(getattr(m, self.metric)) for m in metrics]
        if self.combine == "worst":
            return max(values) if self.minimize else min(values)
        return sum(values) / len(values)

    def violations(self, metrics: Sequence[Metrics]) -> list[float]:
        return [c.violation(metrics, self.combine) for c in self.constraints]

    def feasible(self, violations: Sequence[float]) -> bool:
        return all(v <= 0 for v in violations)

    def better(self, a: float, b: float) -> bool:
        """Is value `a` strictly better than `b`?"""
        if math.isnan(b):
            return not math.isnan(a)
        return a < b if self.minimize else a > b

    def describe(self) -> str:
        text = f"{self.direction} {self.metric}"
        if self.combine == "worst":
            text += " (worst workload)"
        if self.constraints:
            text += " subject to " + ", ".join(map(str, self.constraints))
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": self.direction, "combine": self.combine,
                "constraints": [str(c) for c in self.constraints]}


def _check_metric(name: str, where: str) -> None:
    if name not in Metrics.names() or name == "jobs":
        known = ", ".join(n for n in Metrics.names() if n != "jobs")
        raise ObjectiveError(f"{where}: unknown metric {name!r}; known: {known}")
