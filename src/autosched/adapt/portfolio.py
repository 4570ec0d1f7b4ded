"""A round's portfolio: the configs a decision compares, scored paired on one set of samples.

A search of 16 trials on 4 samples finds a config that wins on those samples; the guardrail then
judged that one config on 8 others. A config that would have passed (small first, when a queue
of small jobs forms behind large ones) was never offered to it when the search's samples ranked
another first. So each round compares a portfolio, on the samples the guardrail decides on:

- the running config;
- the search's best, the search's best within the policy (the best of its trials that keeps
  the operator's policy on the search's own samples: `constraints.PolicySearch`) and the last
  rounds' winners;
- the policy's archetypes (`ConfigSpace.archetypes`: for ``multifactor`` small first, age only,
  GPU first, fair-share heavy and two backfill-heavy ``bf_*`` corners), each laid over the
  running config, pinned knobs kept, clamped into the searched ranges (bounds, maximum step).

`race` scores them all on the first samples, drops those that cannot reach the guardrail's
margin there (their gain + 2 s.e. below it), those that scheduled exactly as another did and
those that break the operator's policy (`constraints`) there (given `milder`, a candidate that
breaks it with a gain past the margin is screened again milder, part of the way from the running
config toward it: `toward`), scores the two best of the rest on the guardrail's samples, and
picks the leader: the best mean paired gain among the candidates that keep the operator's
policy, against the running config and, once a change has been made, against the operator's own
config too (small changes must not add up to one that breaks it). The guardrail judges the
leader against the running config on those samples, with its ``k`` raised for the number of
configs compared (picking the best of ten on the samples that judge it would otherwise reward
luck). While the paired standard error does not decide (the gain is above the margin but within
``k`` s.e.) and the budget's samples could (`futile`), the sample count doubles, up to the
budget; only the running config and the leader are scored on the new samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

from ..space import Config, ConfigError, ConfigSpace, Float, Int
from ..trace.table import Trace
from .constraints import Check, PolicyConstraints
from .errors import AdaptError
from .guardrail import Guardrail, Verdict, pair_gains
from .scoring import Score, ScoreSet

RUNNING = "running"
REFERENCE = "the operator's config"
SEARCH_BEST = "search's best"
SEARCH_WITHIN = "search's best within the policy"
PRUNE_SE = 2.0  # a candidate whose mean gain + this many s.e. is below the margin is dropped early
FINALISTS = 2  # the candidates that go on from the screen to the guardrail's samples
# how far a milder variant of a candidate that breaks the policy goes from the running config
# toward it: a change that takes a gain by making one class wait far longer may keep part of
# the gain, and the policy, when it goes half or a quarter of the way
MILDER = ((0.5, "halfway"), (0.25, "a quarter of the way"))


@dataclass(frozen=True)
class Candidate:
    name: str  # "running", "search's best", "winner 1" (the last round's), or an archetype's label
    config: Config


def candidates(space: ConfigSpace, running: Config, winners: Sequence[Config],
               best: Config | None, within: Config | None = None) -> list[Candidate]:
    """The portfolio, running config first, each config once (its first name kept). `space` is
    the searched space (a restricted one: its pinned knobs and ranges hold); `winners` oldest
    first, as the controller keeps them; `within` the search's best within the policy."""
    out = [Candidate(RUNNING, dict(running))]
    if best is not None:
        out.append(Candidate(SEARCH_BEST, dict(best)))
    if within is not None:
        out.append(Candidate(SEARCH_WITHIN, dict(within)))
    out += [Candidate(f"winner {i}", dict(w)) for i, w in enumerate(reversed(winners), start=1)]
    for label, partial in space.archetypes.items():
        laid = overlay(space, running, partial)
        if laid is not None:
            out.append(Candidate(label, laid))
    seen: set[tuple[tuple[str, str], ...]] = set()
    kept: list[Candidate] = []
    for c in out:
        key = tuple(sorted((k, repr(v)) for k, v in c.config.items()))
        if key not in seen:
            seen.add(key)
            kept.append(c)
    return kept


def overlay(space: ConfigSpace, running: Mapping[str, Any], partial: Mapping[str, Any]) -> Config | None:
    """`partial` (an archetype) laid over `running`: its values for the knobs `space` does not
    pin, numeric ones clamped into `space`'s ranges; weights above their range are first scaled
    down together (their ratios are the order). None when no valid config results."""
    config = {**running, **{k: v for k, v in partial.items() if k not in space.pinned}}
    weights = [w for w in space.weights if w in config]
    tops = {w: _high(space, w) for w in weights}
    over = [w for w in weights if tops[w] is not None and config[w] > tops[w]]
    if over:
        factor = min(tops[w] / config[w] for w in over)  # type: ignore[operator]
        config.update({w: type(config[w])(config[w] * factor) for w in weights})
    for k in space:
        if isinstance(k, (Int, Float)) and k.name in config and k.name not in space.pinned:
            config[k.name] = type(k.default)(min(max(config[k.name], k.low), k.high))
    try:
        return space.validate(config)
    except ConfigError:
        return None


def _high(space: ConfigSpace, name: str) -> float | None:
    k = space[name]
    return float(k.high) if isinstance(k, (Int, Float)) else None


def toward(space: ConfigSpace, running: Mapping[str, Any], target: Mapping[str, Any], t: float) -> Config | None:
    """The config `t` (0 < t < 1) of the way from `running` to `target` in `space`: a numeric knob
    that `target` changes moves that part of the way (on a log-scale knob geometrically, when both
    values are positive), any other knob `target` changes takes its value; pinned knobs stay.
    None when no valid config results."""
    config = dict(running)
    for k in space:
        name = k.name
        if name in space.pinned or name not in target or target[name] == running.get(name):
            continue
        a, b = running.get(name), target[name]
        if isinstance(k, (Int, Float)) and isinstance(a, (int, float)):
            if k.log and a > 0 and b > 0:
                x = math.exp(math.log(a) + t * (math.log(b) - math.log(a)))
            else:
                x = a + t * (b - a)
            config[name] = type(k.default)(round(x) if isinstance(k, Int) else x)
        else:
            config[name] = b
    try:
        return space.validate(config)
    except ConfigError:
        return None


def milder_variants(space: ConfigSpace, running: Mapping[str, Any]) -> Callable[[Candidate], list[Candidate]]:
    """The milder variants of a candidate (`MILDER`, each `toward` it from `running`), for `race`."""

    def variants(c: Candidate) -> list[Candidate]:
        out = []
        for t, how in MILDER:
            config = toward(space, running, c.config, t)
            if config is not None and config != dict(running) and config != c.config:
                out.append(Candidate(f"{c.name}, {how}", config))
        return out

    return variants


def multiple_k(k: float, compared: int) -> float:
    """The guardrail's ``k`` for the best of `compared` configs: the one-sided tail ``k`` leaves
    (P(Z > k)), shared among them (Šidák-like, Bonferroni's split). 1 config: ``k`` itself; k = 1
    over 10 configs: 2.14."""
    if k <= 0 or compared <= 1:
        return k
    return -NormalDist().inv_cdf(NormalDist().cdf(-k) / compared)


@dataclass(frozen=True)
class Budget:
    """How many samples a round's portfolio is scored on: every candidate on the first `screen`,
    the guardrail decides on at least `decide`, doubling up to `most` while undecided."""

    screen: int
    decide: int
    most: int

    def __post_init__(self) -> None:
        if not 1 <= self.screen <= self.decide <= self.most:
            raise AdaptError(f"portfolio samples: need 1 <= screen {self.screen} <= decide {self.decide} <= "
                             f"most {self.most}")


@dataclass(frozen=True)
class Standing:
    """A candidate's paired gain over the running config after the race (on `samples` samples)."""

    name: str
    config: Config
    gain: float
    se: float
    samples: int
    dropped: str = ""  # why it left the race ("" for one still in it at the end)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gain": self.gain, "se": self.se, "samples": self.samples,
                "dropped": self.dropped}


@dataclass(frozen=True)
class RaceResult:
    """What a race found: the leader (None: no candidate other than the running config was left,
    or none keeps the policy), the guardrail's verdict on it, every candidate's standing, the
    running config's and the leader's scores on the final samples, and the leader's policy
    check."""

    leader: Candidate | None
    verdict: Verdict
    standings: tuple[Standing, ...]
    running: ScoreSet
    scores: ScoreSet | None
    check: Check | None
    samples: int
    k: float  # the guardrail's k for the number of configs compared


Scorer = Callable[[Config, Sequence[Trace]], list[Score]]
Draw = Callable[[int, int], list[Trace]]  # (first sample index, how many) -> workloads


def race(portfolio: Sequence[Candidate], draw: Draw, scorer: Scorer, budget: Budget,
         guardrail: Guardrail, constraints: PolicyConstraints, minimize: bool = True,
         milder: Callable[[Candidate], list[Candidate]] | None = None,
         reference: Config | None = None) -> RaceResult:
    """Score `portfolio` (running config first) on samples from `draw` and judge its leader (see
    the module doc). `scorer(config, workloads)` scores a config on workloads, one `Score` each.
    `milder(c)`: the variants screened in place of a candidate that breaks the policy with a gain
    past the margin (`milder_variants`; None: none). `reference`: the operator's own config,
    when it is not the running one: it is scored on the same samples, and a candidate keeps the
    policy only if it keeps it against both (changes that each keep it against the config before
    them must not add up to one that does not). A deterministic source gives fewer samples than
    asked (one replay): the race then decides on what it has."""
    if not portfolio or portfolio[0].name != RUNNING:
        raise AdaptError("a portfolio starts with the running config")
    running = portfolio[0]
    work = draw(0, budget.screen)
    if not work:  # every fresh sample of the coming period was empty
        return RaceResult(None, Verdict(False, 0.0, 0.0, "no job in the fresh samples of the coming period"), (),
                          ScoreSet(()), None, None, 0, guardrail.k)
    sets = {c.name: ScoreSet(tuple(scorer(c.config, work))) for c in portfolio}
    ref = reference if reference is not None and dict(reference) != dict(running.config) else None
    if ref is not None:
        sets[REFERENCE] = ScoreSet(tuple(scorer(ref, work)))

    past: dict[int, dict[tuple[str, str], float]] = {}  # sample count -> running's waits against ref

    def policy(c: Candidate) -> Check:
        if ref is None:
            return constraints.check(sets[RUNNING], sets[c.name], running.config, c.config)
        n_now = len(sets[RUNNING])
        if n_now not in past:
            past[n_now] = {(e.kind, e.name): e.candidate for e in
                           constraints.check(sets[REFERENCE], sets[RUNNING], ref, running.config).effects}
        return _policy_check(constraints, sets, running, ref, past[n_now], c)

    def extend(configs: Sequence[Candidate], more: list[Trace]) -> None:
        """Score `configs` (and the operator's config, when held) on the new samples too."""
        for c in configs:
            sets[c.name] = sets[c.name].extended(scorer(c.config, more))
        if ref is not None:
            sets[REFERENCE] = sets[REFERENCE].extended(scorer(ref, more))
    standing: dict[str, Standing] = {}
    entrants = list(portfolio[1:])  # the candidates raced, milder variants added where they arise
    alive = list(entrants)
    n = len(work)

    def gains(name: str) -> tuple[float, float]:
        return _mean_se(pair_gains(sets[RUNNING].values, sets[name].values, minimize))

    def drop(c: Candidate, why: str) -> None:
        g, se = gains(c.name)
        standing[c.name] = Standing(c.name, c.config, g, se, len(sets[c.name]), why)

    # the screen: what cannot reach the margin goes, what breaks the policy, and what scheduled
    # exactly as a candidate still in the race did (on a trace without accounts, fair-share heavy
    # orders as age only). Only a candidate that stays stands for its schedule: the policy reads
    # the config too, so of two that schedule alike one may keep it (fair-share heavy) and the
    # other not (age only, its fair-share weight 0)
    seen: dict[tuple[float, ...], str] = {tuple(sets[RUNNING].values): RUNNING}
    queue = list(alive)
    while queue:
        c = queue.pop(0)
        g, se = gains(c.name)
        twin = seen.get(tuple(sets[c.name].values))
        if twin is not None:
            drop(c, f"scheduled as {twin} on the first {n} samples")
            alive.remove(c)
        elif n > 1 and g + PRUNE_SE * se < guardrail.margin:
            drop(c, f"cannot reach the margin on the first {n} samples")
            alive.remove(c)
        elif not (early := policy(c)).holds:
            drop(c, f"breaks the policy on the first {n} samples: " + "; ".join(early.violations))
            alive.remove(c)
            if milder is not None and c in portfolio and g > guardrail.margin:
                for m in milder(c):
                    if m.name not in sets:
                        sets[m.name] = ScoreSet(tuple(scorer(m.config, work)))
                        entrants.append(m)
                        alive.append(m)
                        queue.append(m)
        else:
            seen[tuple(sets[c.name].values)] = c.name
    # every config scored counts in the guardrail's k, the milder variants too
    k = multiple_k(guardrail.k, len(entrants))
    judge = Guardrail(k, guardrail.margin, guardrail.max_loss)
    # the best `FINALISTS` of the rest (by their gain on the screen) go on to the guardrail's samples
    alive.sort(key=lambda c: -gains(c.name)[0])
    for c in alive[FINALISTS:]:
        drop(c, f"behind the {FINALISTS} best on the first {n} samples")
    alive = alive[:FINALISTS]
    if alive and n == budget.screen and budget.decide > n:
        more = draw(n, budget.decide - n)
        extend((running, *alive), more)
        n += len(more)
    checks: dict[str, Check] = {}
    while True:
        feasible = []
        for c in alive:
            checks[c.name] = policy(c)
            if checks[c.name].holds:
                feasible.append(c)
        leader = max(feasible, key=lambda c: gains(c.name)[0], default=None)
        if leader is None:
            for c in alive:
                drop(c, "breaks the policy: " + "; ".join(checks[c.name].violations))
            best = max(alive, key=lambda c: gains(c.name)[0], default=None)
            why = ("no candidate but the running config is left" if best is None else
                   f"every candidate left breaks the operator's policy (the best, {best.name}, "
                   f"{gains(best.name)[0]:+.2%})")
            return RaceResult(None, Verdict(False, 0.0, 0.0, why), tuple(standing.values()), sets[RUNNING],
                              None, None, n, k)
        verdict = judge.judge(sets[RUNNING].values, sets[leader.name].values, minimize)
        if verdict.deploy or n >= budget.most or futile(verdict, n, budget.most, k, guardrail):
            break
        more = draw(n, min(n, budget.most - n))
        if not more:  # a deterministic source: nothing more to draw
            break
        for c in alive:
            if c is not leader:
                drop(c, f"behind the leader on {n} samples")
        alive = [leader]
        extend((running, leader), more)
        n += len(more)
    for c in alive:
        g, se = gains(c.name)
        standing[c.name] = Standing(c.name, c.config, g, se, len(sets[c.name]),
                                    "" if c is leader else "behind the leader")
    ordered = tuple(standing[c.name] for c in entrants if c.name in standing)
    return RaceResult(leader, verdict, ordered, sets[RUNNING], sets[leader.name], checks[leader.name], n, k)


def _policy_check(constraints: PolicyConstraints, sets: Mapping[str, ScoreSet], running: Candidate,
                  reference: Config, now: Mapping[tuple[str, str], float], c: Candidate) -> Check:
    """`c`'s policy check against the running config and against the operator's `reference` too
    (scored in ``sets[REFERENCE]``; `now`: the running config's waits against it, by effect).
    Against the reference, a wait counts as broken only where `c` makes it longer than the running
    config does: where the running config is past the policy already (the workload moved), a
    change back toward it is no break. The effects that break it against the reference join the
    evidence, named so."""
    check = constraints.check(sets[RUNNING], sets[c.name], running.config, c.config)
    far = constraints.check(sets[REFERENCE], sets[c.name], reference, c.config)
    failing = [e for e in far.effects if not e.holds]
    broken = [(e, line) for e, line in zip(failing, far.violations)
              if e.candidate > now.get((e.kind, e.name), -math.inf)]
    return Check(check.effects + tuple(replace(e, name=f"{e.name}, against {REFERENCE}") for e, _ in broken),
                 check.violations + tuple(f"against {REFERENCE}: {line}" for _, line in broken))


def futile(verdict: Verdict, n: int, most: int, k: float, guardrail: Guardrail) -> bool:
    """Whether more samples cannot make the guardrail deploy: the gain is below the margin,
    or even the full budget's smaller standard error (s.e. x sqrt(n / most), the gains' spread
    staying what it is) would leave it within ``k`` of them. Growing the samples costs two
    simulations each; a gain this close to the noise is not worth them."""
    if verdict.gain <= guardrail.margin:
        return True
    return verdict.gain <= k * verdict.spread * math.sqrt(n / most)


def _mean_se(gains: Sequence[float]) -> tuple[float, float]:
    n = len(gains)
    mean = sum(gains) / n
    se = math.sqrt(sum((g - mean) ** 2 for g in gains) / (n - 1) / n) if n > 1 else 0.0
    return mean, se
