"""Policies' `ConfigSpace`s as an Optuna search space.

Knobs are declared only in each policy's ConfigSpace; `distribution` is the one place that maps a
knob to an Optuna distribution. With several policies, the policy is itself a categorical
parameter and each policy's knobs are named ``policy.knob`` and suggested only under that policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from ..policies import Policy, get_policy
from ..space import Bool, Categorical, Config, ConfigSpace, Float, Int, Knob
from .config import TuneError

POLICY_PARAM = "policy"


def distribution(knob: Knob) -> BaseDistribution:
    """The Optuna distribution of a knob (the single knob → Optuna mapping)."""
    if isinstance(knob, Float):
        return FloatDistribution(knob.low, knob.high, log=knob.log)
    if isinstance(knob, Int):
        return IntDistribution(knob.low, knob.high, log=knob.log)
    if isinstance(knob, Bool):
        return CategoricalDistribution((False, True))
    if isinstance(knob, Categorical):
        return CategoricalDistribution(knob.choices)
    raise TypeError(f"knob {knob.name!r}: no Optuna distribution for {type(knob).__name__}")


def from_unit(knob: Knob, u: float) -> Any:
    """The knob value at position u in [0, 1) of its range (log-scaled knobs in log space)."""
    if isinstance(knob, Float):
        if knob.log:
            return math.exp(math.log(knob.low) + u * (math.log(knob.high) - math.log(knob.low)))
        return knob.low + u * (knob.high - knob.low)
    if isinstance(knob, Int):
        if knob.log:
            x = math.exp(math.log(knob.low) + u * (math.log(knob.high + 1) - math.log(knob.low)))
        else:
            x = knob.low + u * (knob.high - knob.low + 1)
        return min(knob.high, max(knob.low, int(x)))
    if isinstance(knob, Bool):
        return u >= 0.5
    if isinstance(knob, Categorical):
        return knob.choices[min(len(knob.choices) - 1, int(u * len(knob.choices)))]
    raise TypeError(f"knob {knob.name!r}: cannot map {type(knob).__name__}")


def latin_hypercube(space: ConfigSpace, n: int, seed: int | None) -> list[Config]:
    """`n` configs spread over the space: a Latin hypercube whose columns are made nearly
    uncorrelated (scipy's random-cd optimisation), so that in a small design no useless knob
    happens to move with a useful one - screening's independence tests depend on that."""
    from scipy.stats import qmc

    if n <= 0:
        return []
    knobs = list(space.knobs)
    u = qmc.LatinHypercube(d=len(knobs), seed=seed, optimization="random-cd").random(n)
    return [space.validate({k.name: from_unit(k, float(row[i])) for i, k in enumerate(knobs)}) for row in u]


def suggest(trial: optuna.Trial, name: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    assert isinstance(dist, CategoricalDistribution)  # `distribution` makes only these three kinds
    return trial.suggest_categorical(name, dist.choices)


@dataclass
class SearchSpace:
    """The policies to search and, per policy, the knobs frozen by screening."""

    policies: tuple[type[Policy], ...]
    frozen: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy -> knob -> value

    @classmethod
    def of(cls, policy: "str | type[Policy] | Sequence[str | type[Policy]]") -> "SearchSpace":
        items = [policy] if isinstance(policy, (str, type)) else list(policy)
        if not items:
            raise TuneError("no policy to tune")
        classes = tuple(get_policy(p) if isinstance(p, str) else p for p in items)
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise TuneError(f"policy listed twice: {', '.join(names)}")
        return cls(classes)

    @property
    def multi(self) -> bool:
        return len(self.policies) > 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.policies)

    def policy(self, name: str) -> type[Policy]:
        for p in self.policies:
            if p.name == name:
                return p
        raise KeyError(name)

    def param_name(self, policy: str, knob: str) -> str:
        return f"{policy}.{knob}" if self.multi else knob

    def searched(self, policy: str) -> list[str]:
        frozen = self.frozen.get(policy, {})
        return [k.name for k in self.policy(policy).space if k.name not in frozen]

    def sample(self, trial: optuna.Trial) -> tuple[str, Config]:
        """Ask the trial for a policy and its config (inactive knobs keep their defaults)."""
        name = self.names[0]
        if self.multi:
            name = trial.suggest_categorical(POLICY_PARAM, self.names)
        space: ConfigSpace = self.policy(name).space
        frozen = self.frozen.get(name, {})
        config: Config = space.default()
        config.update(frozen)
        for knob in space:
            if knob.name in frozen or not space.is_active(knob, config):
                continue
            config[knob.name] = suggest(trial, self.param_name(name, knob.name), distribution(knob))
        return name, space.validate(config)

    def params(self, policy: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna params that make `sample` return `config` (for enqueue_trial / warm start)."""
        space = self.policy(policy).space
        config = space.validate(config)
        frozen = self.frozen.get(policy, {})
        out: dict[str, Any] = {POLICY_PARAM: policy} if self.multi else {}
        for knob in space:
            if knob.name not in frozen and space.is_active(knob, config):
                out[self.param_name(policy, knob.name)] = config[knob.name]
        return out
