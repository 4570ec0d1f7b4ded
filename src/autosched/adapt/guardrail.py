"""The guardrail: deploy a new config only when its predicted gain is clearly more than noise,
and change no knob that does not carry part of that gain (`smallest_change`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import AdaptError


@dataclass(frozen=True)
class Verdict:
    deploy: bool
    gain: float  # mean relative paired improvement over the workloads (0.05 = 5% better)
    spread: float  # its standard error (0 with a single workload)
    reason: str


@dataclass(frozen=True)
class Guardrail:
    """Deploy when mean paired gain > ``k`` × its standard error and > ``margin``, and (if
    ``max_loss`` is set) the candidate loses more than ``max_loss`` on no workload.

    Both configs are scored on the same sampled workloads, so the comparison is paired: the
    per-workload gains cancel most of the sampling noise that the workloads share. With one
    workload there is no spread to measure and only the margin applies. ``max_loss`` is the rule
    for scenarios (a busier and a quieter period, `ModelSource` ``level_sd``): their gains differ
    by design, not by noise, so the standard error overstates the doubt; what must hold is that
    the candidate is better on average and not clearly worse in any scenario.
    """

    # k = 1 on 8 fresh samples: k = 2 on 4 kept the default through real gains of 28-38%
    # (docs/history.md, "the guardrail on 8 fresh samples").
    k: float = 1.0
    margin: float = 0.01
    max_loss: float | None = None

    def __post_init__(self) -> None:
        values = (self.k, self.margin, 0.0 if self.max_loss is None else self.max_loss)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise AdaptError(f"the guardrail's k, margin and max loss must be finite and >= 0 (got k {self.k:g}, "
                             f"margin {self.margin:g}, max loss {self.max_loss})")

    def judge(self, running: Sequence[float], candidate: Sequence[float], minimize: bool = True) -> Verdict:
        if len(running) != len(candidate) or not running:
            raise AdaptError("guardrail: need the same, non-zero number of values for both configs")
        gains = pair_gains(running, candidate, minimize)
        n = len(gains)
        mean, se = mean_se(gains)
        if mean <= self.margin:
            why = "predicted worse" if mean < 0 else "gain below the margin"
            return Verdict(False, mean, se, f"{why}: {mean:+.2%} <= margin {self.margin:.2%}")
        if mean <= self.k * se:
            return Verdict(False, mean, se, f"gain {mean:+.2%} within noise ({self.k:g} x s.e. = {self.k * se:.2%})")
        worst = min(gains)
        if self.max_loss is not None and worst < -self.max_loss:
            return Verdict(False, mean, se, f"gain {mean:+.2%} but {worst:+.2%} on one workload "
                                            f"(a loss beyond {self.max_loss:.2%})")
        noise = f" > {self.k:g} x s.e. {se:.2%}" if n > 1 else " (one workload: no spread measured)"
        floor = f", worst workload {worst:+.2%}" if self.max_loss is not None else ""
        return Verdict(True, mean, se, f"gain {mean:+.2%}{noise} and > margin {self.margin:.2%}{floor}")


@dataclass(frozen=True)
class Reduction:
    """A winner cut down to the knobs that carry its gain (`smallest_change`)."""

    config: dict[str, Any]  # the winner with every dropped knob back at its running value
    values: tuple[float, ...]  # its metric per workload
    gain: float  # its mean paired gain over the running config
    dropped: tuple[str, ...]  # knobs put back, in the order they were tried
    # each kept knob: the gain lost when only it goes back to its running value, as a fraction
    # of `gain` (they need not add up to 1: knobs interact)
    shares: dict[str, float]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """The mean of paired `values` (one a sample) and its standard error (0 with one value: no
    spread measured)."""
    n = len(values)
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else 0.0
    return mean, se


def pair_gains(running: Sequence[float], candidate: Sequence[float], minimize: bool = True) -> list[float]:
    """The relative gain of `candidate` over `running` on each workload (0.05 = 5% better)."""
    return [_gain(r, c, minimize) for r, c in zip(running, candidate)]


def paired_gain(running: Sequence[float], candidate: Sequence[float], minimize: bool = True) -> float:
    """The mean relative paired gain of `candidate` over `running` (0.05 = 5% better)."""
    gains = pair_gains(running, candidate, minimize)
    return sum(gains) / len(gains)


def smallest_change(running: Mapping[str, Any], candidate: Mapping[str, Any],
                    running_values: Sequence[float], candidate_values: Sequence[float],
                    score: Callable[[dict[str, Any]], Sequence[float] | None],
                    minimize: bool = True) -> Reduction:
    """`candidate` without the knobs that carry none of its gain over `running`: each changed
    knob in turn goes back to its running value, and stays back when that does not lower the
    mean paired gain, pass after pass until a pass puts none back (so that each knob left loses
    gain when it alone goes back). `score(config)` gives a config's metric per workload (the same
    workloads, in the same order, as the two value lists; None: not a valid config, the knob
    stays). Then each kept knob's share of the gain. Pure but for `score`'s simulations; a config is scored
    once."""
    memo: dict[tuple[tuple[str, str], ...], Sequence[float] | None] = {}

    def scored(config: dict[str, Any]) -> Sequence[float] | None:
        key = tuple(sorted((k, repr(v)) for k, v in config.items()))
        if key not in memo:
            memo[key] = score(config)
        return memo[key]

    current, values = dict(candidate), tuple(candidate_values)
    gain = paired_gain(running_values, values, minimize)
    dropped: list[str] = []
    again = True
    while again:  # to a fixed point: a knob kept early may carry nothing once others went back
        again = False
        for knob in [k for k in current if k in running and current[k] != running[k]]:
            trial = {**current, knob: running[knob]}
            got = scored(trial)
            if got is not None and (g := paired_gain(running_values, got, minimize)) >= gain:
                current, values, gain = trial, tuple(got), g
                dropped.append(knob)
                again = True
    shares = knob_shares(running, current, running_values, values, scored, minimize)
    return Reduction(current, values, gain, tuple(dropped), shares)


def knob_shares(running: Mapping[str, Any], config: Mapping[str, Any],
                running_values: Sequence[float], values: Sequence[float],
                score: Callable[[dict[str, Any]], Sequence[float] | None],
                minimize: bool = True) -> dict[str, float]:
    """Each knob `config` changes from `running`: the gain lost when only it goes back to its
    running value, as a fraction of `config`'s gain (a knob `score` cannot judge is left out)."""
    gain = paired_gain(running_values, values, minimize)
    shares: dict[str, float] = {}
    for knob in [k for k in config if k in running and config[k] != running[k]]:
        got = score({**config, knob: running[knob]})
        if got is not None and gain != 0:
            shares[knob] = (gain - paired_gain(running_values, got, minimize)) / abs(gain)
    return shares


def _gain(running: float, candidate: float, minimize: bool) -> float:
    scale = abs(running) if running else 1.0
    return (running - candidate) / scale if minimize else (candidate - running) / scale
