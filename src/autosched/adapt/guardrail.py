"""The guardrail: deploy a new config only when its predicted gain is clearly more than noise."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import AdaptError


@dataclass(frozen=True)
class Verdict:
    deploy: bool
    gain: float  # mean relative paired improvement over the workloads (0.05 = 5% better)
    spread: float  # its standard error (0 with a single workload)
    reason: str


@dataclass(frozen=True)
class Guardrail:
    """Deploy when mean paired gain > ``k`` × its standard error and > ``min_margin``.

    Both configs are scored on the same sampled workloads, so the comparison is paired: the
    per-workload gains cancel most of the sampling noise that the workloads share. With one
    workload there is no spread to measure and only the margin applies.
    """

    k: float = 2.0
    min_margin: float = 0.01

    def __post_init__(self) -> None:
        if self.k < 0 or self.min_margin < 0:
            raise AdaptError("guardrail: k and min_margin must be >= 0")

    def judge(self, running: Sequence[float], candidate: Sequence[float], minimize: bool = True) -> Verdict:
        if len(running) != len(candidate) or not running:
            raise ValueError("guardrail: need the same, non-zero number of values for both configs")
        gains = [_gain(r, c, minimize) for r, c in zip(running, candidate)]
        n = len(gains)
        mean = sum(gains) / n
        se = math.sqrt(sum((g - mean) ** 2 for g in gains) / (n - 1) / n) if n > 1 else 0.0
        if mean <= self.min_margin:
            why = "predicted worse" if mean < 0 else "gain below the margin"
            return Verdict(False, mean, se, f"{why}: {mean:+.2%} <= margin {self.min_margin:.2%}")
        if mean <= self.k * se:
            return Verdict(False, mean, se, f"gain {mean:+.2%} within noise ({self.k:g} x s.e. = {self.k * se:.2%})")
        noise = f" > {self.k:g} x s.e. {se:.2%}" if n > 1 else " (one workload: no spread measured)"
        return Verdict(True, mean, se, f"gain {mean:+.2%}{noise} and > margin {self.min_margin:.2%}")


def _gain(running: float, candidate: float, minimize: bool) -> float:
    scale = abs(running) if running else 1.0
    return (running - candidate) / scale if minimize else (candidate - running) / scale
