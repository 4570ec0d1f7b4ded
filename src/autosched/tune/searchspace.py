"""Policies' `ConfigSpace`s as an Optuna search space.

Knobs are declared only in each policy's ConfigSpace; `distribution` is the one place that maps a
knob to an Optuna distribution. With several policies, the policy is itself a categorical
parameter and each policy's knobs are named ``policy.knob`` and suggested only under that policy.
A space's declared weights (`ConfigSpace.weights`) are searched as a direction (one share in
[0, 1] per weight: only their ratios count) and a scale (the largest weight, log scale) instead
of one by one: Slurm orders jobs by the ratios of its priority weights, so most of a box of
independent weights repeats the same orders at other scales.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from ..policies import Policy, get_policy
from ..space import Bool, Categorical, Config, ConfigError, ConfigSpace, Float, Int, Knob, Subspace
from .config import TuneError

POLICY_PARAM = "policy"


def distribution(knob: Knob) -> BaseDistribution:
    """The Optuna distribution of a knob (the single knob → Optuna mapping): numeric knobs over
    the range a search covers (`Int.searched`, `Float.searched`)."""
    if isinstance(knob, Float):
        low, high = knob.searched()
        return FloatDistribution(low, high, log=knob.log)
    if isinstance(knob, Int):
        lo, hi = knob.searched()
        return IntDistribution(lo, hi, log=knob.log)
    if isinstance(knob, Bool):
        return CategoricalDistribution((False, True))
    if isinstance(knob, Categorical):
        return CategoricalDistribution(knob.choices)
    raise TypeError(f"knob {knob.name!r}: no Optuna distribution for {type(knob).__name__}")


def from_unit(knob: Knob, u: float) -> Any:
    """The knob value at position u in [0, 1) of the range a search covers (log-scaled knobs in
    log space)."""
    if isinstance(knob, Float):
        low, high = knob.searched()
        if knob.log:
            return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
        return low + u * (high - low)
    if isinstance(knob, Int):
        lo, hi = knob.searched()
        if knob.log:
            x = math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))
        else:
            x = lo + u * (hi - lo + 1)
        return min(hi, max(lo, int(x)))
    if isinstance(knob, Bool):
        return u >= 0.5
    if isinstance(knob, Categorical):
        return knob.choices[min(len(knob.choices) - 1, int(u * len(knob.choices)))]
    raise TypeError(f"knob {knob.name!r}: cannot map {type(knob).__name__}")


def latin_hypercube(space: ConfigSpace, n: int, seed: int | None) -> list[Config]:
    """`n` configs spread over the space's unpinned knobs: a Latin hypercube whose columns are
    made nearly uncorrelated (scipy's random-cd optimisation), so that in a small design no
    useless knob happens to move with a useful one - screening's independence tests depend on
    that."""
    knobs = [k for k in space.knobs if k.name not in space.pinned]
    return [space.validate(dict(zip((k.name for k in knobs), row)))
            for row in _hypercube(knobs, n, seed)]


def _hypercube(columns: Sequence[Knob], n: int, seed: int | None) -> list[list[Any]]:
    """`n` rows of values, one per column knob, from a Latin hypercube (see `latin_hypercube`)."""
    from scipy.stats import qmc

    if n <= 0:
        return []
    u = qmc.LatinHypercube(d=len(columns), seed=seed, optimization="random-cd").random(n)
    return [[from_unit(k, float(row[i])) for i, k in enumerate(columns)] for row in u]


def suggest(trial: optuna.Trial, name: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    assert isinstance(dist, CategoricalDistribution)  # `distribution` makes only these three kinds
    return trial.suggest_categorical(name, dist.choices)


def share_param(weight: str) -> str:
    """The search parameter of a weight's share of the weight vector's direction."""
    return f"share({weight})"


SCALE_PARAM = "scale(weights)"  # the search parameter of the weight vector's scale (its largest weight)


def weights_of(space: ConfigSpace, shares: Sequence[float], scale: float) -> dict[str, int]:
    """The weights of a direction (`shares`, one per ``space.weights``, any non-negative
    numbers: only their ratios count) and a scale (the largest weight): each weight is
    scale x share / largest share, rounded; all zero when every share is."""
    top = max(shares)
    out = {}
    for name, s in zip(space.weights, shares):
        knob = space[name]
        assert isinstance(knob, Int)  # ConfigSpace checks that weights are Int knobs
        w = int(math.floor(scale * s / top + 0.5)) if top > 0 else 0
        out[name] = min(knob.high, max(knob.low, w))
    return out


def direction_of(space: ConfigSpace, config: Mapping[str, Any]) -> tuple[list[float], float]:
    """The shares and scale that give `config`'s weights back (`weights_of` inverts it exactly):
    the weights over the largest, and the largest (the lowest scale when all are zero)."""
    w = [float(config[n]) for n in space.weights]
    top = max(w)
    if top <= 0:
        return [0.0] * len(w), space.weight_scale[0]
    return [x / top for x in w], top


@dataclass
class SearchSpace:
    """The policies to search, each one's knob space (restricted by the search's `Subspace`, if
    any) and, per policy, the knobs frozen by screening."""

    policies: tuple[type[Policy], ...]
    frozen: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy -> knob -> value
    spaces: dict[str, ConfigSpace] = field(default_factory=dict)  # policy -> the space searched

    def __post_init__(self) -> None:
        for p in self.policies:
            self.spaces.setdefault(p.name, p.space)

    @classmethod
    def of(cls, policy: "str | type[Policy] | Sequence[str | type[Policy]]",
           subspace: Subspace | None = None) -> "SearchSpace":
        """The search space of one policy or several (by name or class); `subspace` restricts a
        single policy's knobs (`ConfigSpace.restrict`)."""
        items = [policy] if isinstance(policy, (str, type)) else list(policy)
        if not items:
            raise TuneError("no policy to tune")
        classes = tuple(get_policy(p) if isinstance(p, str) else p for p in items)
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise TuneError(f"policy listed twice: {', '.join(names)}")
        if subspace is None:
            return cls(classes)
        if len(classes) > 1:
            raise TuneError(f"a subspace restricts one policy's knobs, not {len(classes)} policies")
        return cls(classes, spaces={names[0]: classes[0].space.restrict(subspace)})

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

    def config_space(self, name: str) -> ConfigSpace:
        """The knob space searched for policy `name` (its own, or the part a subspace leaves)."""
        return self.spaces[name]

    def structured(self, name: str) -> bool:
        """Whether policy `name` is searched the way its space declares (weights, archetypes,
        secondary knobs; one policy only)."""
        return not self.multi and self.spaces[name].structured

    def param_name(self, policy: str, knob: str) -> str:
        return f"{policy}.{knob}" if self.multi else knob

    def searched(self, policy: str) -> list[str]:
        """The knobs the search moves: neither pinned nor frozen by screening."""
        space = self.spaces[policy]
        frozen = self.frozen.get(policy, {})
        return [k.name for k in space if k.name not in frozen and k.name not in space.pinned]

    def weight_group(self, policy: str) -> tuple[str, ...]:
        """The weights searched as a direction and a scale (`ConfigSpace.weights`): all of the
        space's weights while none is pinned, bounded or frozen; else none (each is searched as a
        knob of its own)."""
        space = self.spaces[policy]
        held = set(space.pinned) | set(space.bounds) | set(self.frozen.get(policy, {}))
        return space.weights if self.structured(policy) and not held & set(space.weights) else ()

    def sample(self, trial: optuna.Trial) -> tuple[str, Config]:
        """Ask the trial for a policy and its config (inactive knobs keep their defaults)."""
        name = self.names[0]
        if self.multi:
            name = trial.suggest_categorical(POLICY_PARAM, self.names)
        space = self.spaces[name]
        frozen = self.frozen.get(name, {})
        group = self.weight_group(name)
        config: Config = space.default()
        config.update(frozen)
        for knob in space:
            if knob.name in frozen or knob.name in space.pinned or not space.is_active(knob, config):
                continue
            if knob.name in group:
                if knob.name == group[0]:  # the whole weight vector, where its first weight is
                    shares = [trial.suggest_float(share_param(w), 0.0, 1.0) for w in group]
                    scale = trial.suggest_float(SCALE_PARAM, *space.weight_scale, log=True)
                    config.update(weights_of(space, shares, scale))
                continue
            config[knob.name] = suggest(trial, self.param_name(name, knob.name), distribution(knob))
        return name, space.validate(config)

    def params(self, policy: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna params that make `sample` return `config` (for enqueue_trial / warm start)."""
        space = self.spaces[policy]
        config = space.validate(config)
        frozen = self.frozen.get(policy, {})
        group = self.weight_group(policy)
        out: dict[str, Any] = {POLICY_PARAM: policy} if self.multi else {}
        for knob in space:
            if knob.name in frozen or knob.name in space.pinned or not space.is_active(knob, config):
                continue
            if knob.name in group:
                if knob.name == group[0]:
                    shares, scale = direction_of(space, config)
                    out.update({share_param(w): s for w, s in zip(group, shares)})
                    out[SCALE_PARAM] = scale
                continue
            out[self.param_name(policy, knob.name)] = config[knob.name]
        return out

    def design(self, policy: str, n: int, seed: int | None) -> list[Config]:
        """`n` configs spread over the searched knobs (`latin_hypercube`); with a weight group,
        over its direction and scale instead of its weights one by one."""
        space = self.spaces[policy]
        group = self.weight_group(policy)
        if not group:
            return latin_hypercube(space, n, seed)
        knobs = [k for k in space.knobs if k.name not in space.pinned and k.name not in group]
        shares = [Float(share_param(w), "share", low=0.0, high=1.0) for w in group]
        scale = Float(SCALE_PARAM, "scale", low=space.weight_scale[0], high=space.weight_scale[1],
                      default=space.weight_scale[1], log=True)
        out = []
        for row in _hypercube([*knobs, *shares, scale], n, seed):
            config = dict(zip((k.name for k in knobs), row))
            config.update(weights_of(space, row[len(knobs):-1], row[-1]))
            out.append(space.validate(config))
        return out

    def archetypes(self, policy: str) -> list[Config]:
        """The space's archetypes as whole configs (each over the start config), those the
        searched space holds (a pinned or bounded knob may exclude one). An archetype whose
        weights lie above their bounds comes with its weights scaled down to fit: the weights
        matter only through their ratios, so it is the same order (up to integer truncation).
        Scaling only goes down: a bound whose low is above an archetype's weight (0, mostly)
        still excludes it."""
        space = self.spaces[policy]
        out = []
        for partial in space.archetypes.values():
            candidate = _weights_within(space, {**space.default(), **partial})
            if candidate is None:
                continue
            try:
                out.append(space.validate(candidate))
            except ConfigError:
                continue
        return out


def _weights_within(space: ConfigSpace, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """`config` with its weights (`ConfigSpace.weights`) scaled down by one factor, in integers,
    so that none is above its knob's high (a bounded space's); unchanged when they all fit. None
    when scaling cannot keep the order: a weight it sets would become 0."""
    high = {w: int(cast(Int, space[w]).high) for w in space.weights}
    over = [w for w in space.weights if config[w] > high[w]]
    if not over:
        return dict(config)
    tight = min(over, key=lambda w: high[w] / config[w])
    scaled = {w: config[w] * high[tight] // config[tight] for w in space.weights}
    if any(config[w] > 0 and scaled[w] == 0 for w in space.weights):
        return None
    return {**config, **scaled}
