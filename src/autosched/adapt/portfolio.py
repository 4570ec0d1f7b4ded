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
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

from ..space import Config, ConfigError, ConfigSpace, Float, Int
from ..trace.table import Trace
from .constraints import FAIRSHARE, Check, PolicyConstraints, fairshare_fraction
from .errors import AdaptError
from .guardrail import Guardrail, Verdict, mean_se, pair_gains
from .scoring import Score, ScoreSet

RUNNING = "running"
REFERENCE = "the operator's config"
SEARCH_BEST = "search's best"
SEARCH_WITHIN = "search's best within the policy"
# what fitting an archetype to the operator's rules changed (`within_rules`), named in its label
FLOORED = "fair share at the floor"
PINS_KEPT = "the pins kept"
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
               best: Config | None, within: Config | None = None,
               rules: PolicyConstraints | None = None) -> list[Candidate]:
    """The portfolio, running config first, each config once (its first name kept). `space` is
    the searched space (a restricted one: its pinned knobs and ranges hold); `winners` oldest
    first, as the controller keeps them; `within` the search's best within the policy. `rules`:
    the operator's policy, whose rules on the config itself each archetype is fitted to
    (`within_rules`)."""
    out = [Candidate(RUNNING, dict(running))]
    if best is not None:
        out.append(Candidate(SEARCH_BEST, dict(best)))
    if within is not None:
        out.append(Candidate(SEARCH_WITHIN, dict(within)))
    out += [Candidate(f"winner {i}", dict(w)) for i, w in enumerate(reversed(winners), start=1)]
    for label, partial in space.archetypes.items():
        laid = overlay(space, running, partial)
        if laid is not None and rules is not None and rules.config_violations(running, laid):
            fitted = within_rules(space, rules, running, laid)
            if fitted is not None:
                label = f"{label}, {fitting(laid, fitted, rules.pins)}"
            laid = fitted
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


def within_rules(space: ConfigSpace, rules: PolicyConstraints, running: Config, config: Config) -> Config | None:
    """`config` fitted to the operator's rules on the config itself (`PolicyConstraints.
    config_violations`): pinned knobs back at their running values, and fair share's weight
    raised to its floor (the other weights scaled down together where that is past its range),
    so that an archetype that sets fair share to 0 is raced as the nearest order the operator
    allows instead of being refused whatever it schedules. None when no such config is valid."""
    fitted = {**config, **{k: running[k] for k in rules.pins if k in running}}
    floor = rules.floor(running)
    frac = fairshare_fraction(fitted, rules.weights)
    if floor is not None and frac is not None and frac < floor:
        top = max((float(fitted[w]) for w in rules.weights if w in fitted and w != FAIRSHARE), default=0.0)
        fitted[FAIRSHARE] = type(fitted[FAIRSHARE])(math.ceil(floor * top))
    laid = overlay(space, running, fitted)
    return None if laid is None or rules.config_violations(running, laid) else laid


def fitting(config: Config, fitted: Config, pins: Sequence[str]) -> str:
    """What `within_rules` changed in `config`: fair share raised to its floor (the other weights
    scaled with it where its range is short), the `pins` put back, or both."""
    what = [FLOORED] if fitted.get(FAIRSHARE) != config.get(FAIRSHARE) else []
    if any(k in fitted and fitted[k] != config.get(k) for k in pins):
        what.append(PINS_KEPT)
    return " and ".join(what)


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
    work = draw(0, budget.screen)
    if not work:  # every fresh sample of the coming period was empty
        return RaceResult(None, Verdict(False, 0.0, 0.0, "no job in the fresh samples of the coming period"), (),
                          ScoreSet(()), None, None, 0, guardrail.k)
    held = reference if reference is not None and dict(reference) != dict(portfolio[0].config) else None
    state = _Race(portfolio, scorer, constraints, minimize, held)
    state.start(work)
    alive = state.screen(work, guardrail.margin, milder)
    # every config scored counts in the guardrail's k, the milder variants too
    judge = Guardrail(multiple_k(guardrail.k, len(state.entrants)), guardrail.margin, guardrail.max_loss)
    alive = state.finalists(alive, len(work))
    n = len(work)
    if alive and n == budget.screen and budget.decide > n:  # fewer than asked: a replay, it has no more
        more = draw(n, budget.decide - n)
        state.extend((state.running, *alive), more)
        n += len(more)
    return state.decide(alive, n, draw, budget.most, judge)


@dataclass
class _Race:
    """One race's state: every config's scores by name (the operator's config's as `REFERENCE`),
    the candidates raced (`entrants`: milder variants join where they arise), the standings of
    those that left and the finalists' last policy checks. `reference`: the operator's config,
    None when it is the running one."""

    portfolio: Sequence[Candidate]
    scorer: Scorer
    constraints: PolicyConstraints
    minimize: bool
    reference: Config | None
    sets: dict[str, ScoreSet] = field(default_factory=dict)
    entrants: list[Candidate] = field(default_factory=list)
    standing: dict[str, Standing] = field(default_factory=dict)
    checks: dict[str, Check] = field(default_factory=dict)
    # the running config's waits against the reference, by sample count: they change only when
    # the samples grow, and every candidate's check reads them
    past: dict[int, dict[tuple[str, str], float]] = field(default_factory=dict)

    @property
    def running(self) -> Candidate:
        return self.portfolio[0]

    def start(self, work: list[Trace]) -> None:
        """Score the portfolio, and the reference when held, on the first samples."""
        for c in self.portfolio:
            self.sets[c.name] = ScoreSet(tuple(self.scorer(c.config, work)))
        if self.reference is not None:
            self.sets[REFERENCE] = ScoreSet(tuple(self.scorer(self.reference, work)))
        self.entrants = list(self.portfolio[1:])

    def policy(self, c: Candidate) -> Check:
        """`c`'s policy check against the running config, and against the reference when held."""
        running = self.sets[RUNNING]
        if self.reference is None:
            return self.constraints.check(running, self.sets[c.name], self.running.config, c.config)
        n = len(running)
        if n not in self.past:
            effects = self.constraints.check(self.sets[REFERENCE], running, self.reference, self.running.config).effects
            self.past[n] = {(e.kind, e.name): e.candidate for e in effects}
        return _policy_check(self.constraints, self.sets, self.running, self.reference, self.past[n], c)

    def extend(self, configs: Sequence[Candidate], more: list[Trace]) -> None:
        """Score `configs`, and the reference when held, on the new samples `more` too."""
        for c in configs:
            self.sets[c.name] = self.sets[c.name].extended(self.scorer(c.config, more))
        if self.reference is not None:
            self.sets[REFERENCE] = self.sets[REFERENCE].extended(self.scorer(self.reference, more))

    def gains(self, name: str) -> tuple[float, float]:
        """The mean paired gain of `name` over the running config, and its standard error."""
        return mean_se(pair_gains(self.sets[RUNNING].values, self.sets[name].values, self.minimize))

    def drop(self, c: Candidate, why: str) -> None:
        """Record `c`'s standing as it leaves the race (`why` "": the leader, at the end)."""
        g, se = self.gains(c.name)
        self.standing[c.name] = Standing(c.name, c.config, g, se, len(self.sets[c.name]), why)

    def screen(self, work: list[Trace], margin: float,
               milder: Callable[[Candidate], list[Candidate]] | None) -> list[Candidate]:
        """The entrants left after the first samples `work`, in order: what scheduled exactly as
        one still in the race did, what cannot reach the `margin` and what breaks the policy leave
        (with `milder`, a candidate of the portfolio that breaks it with a gain past the margin
        gives way to its milder variants, scored on `work` and screened in turn)."""
        # twins: on a trace without accounts, fair-share heavy orders as age only. Only a
        # candidate that stays stands for its schedule: the policy reads the config too, so of two
        # that schedule alike one may keep it (fair-share heavy) and the other not (age only, its
        # fair-share weight 0)
        n = len(work)
        alive = list(self.entrants)
        queue = list(alive)
        seen: dict[tuple[float, ...], str] = {tuple(self.sets[RUNNING].values): RUNNING}
        while queue:
            c = queue.pop(0)
            g, se = self.gains(c.name)
            twin = seen.get(tuple(self.sets[c.name].values))
            if twin is not None:
                self.drop(c, f"scheduled as {twin} on the first {n} samples")
            elif n > 1 and g + PRUNE_SE * se < margin:
                self.drop(c, f"cannot reach the margin on the first {n} samples")
            elif not (early := self.policy(c)).holds:
                self.drop(c, f"breaks the policy on the first {n} samples: " + "; ".join(early.violations))
                if milder is not None and c in self.portfolio and g > margin:
                    variants = self.enter(milder(c), work)
                    alive += variants
                    queue += variants
            else:
                seen[tuple(self.sets[c.name].values)] = c.name
                continue
            alive.remove(c)
        return alive

    def enter(self, variants: Sequence[Candidate], work: list[Trace]) -> list[Candidate]:
        """Those of `variants` not scored yet (by name), scored on `work` and entered."""
        new = []
        for m in variants:
            if m.name not in self.sets:
                self.sets[m.name] = ScoreSet(tuple(self.scorer(m.config, work)))
                self.entrants.append(m)
                new.append(m)
        return new

    def finalists(self, alive: Sequence[Candidate], n: int) -> list[Candidate]:
        """The best `FINALISTS` of `alive` by their gain on the first `n` samples; the rest leave."""
        ranked = sorted(alive, key=lambda c: -self.gains(c.name)[0])
        for c in ranked[FINALISTS:]:
            self.drop(c, f"behind the {FINALISTS} best on the first {n} samples")
        return ranked[:FINALISTS]

    def decide(self, alive: list[Candidate], n: int, draw: Draw, most: int, judge: Guardrail) -> RaceResult:
        """`judge`'s verdict on the leader of `alive` on the `n` samples scored; while it does not
        decide and more samples could, they double (up to `most`), for the leader alone."""
        while True:
            leader = self.lead(alive)
            if leader is None:
                return self.no_leader(alive, n, judge.k)
            verdict = judge.judge(self.sets[RUNNING].values, self.sets[leader.name].values, self.minimize)
            if verdict.deploy or n >= most or futile(verdict, n, most, judge):
                break
            more = draw(n, min(n, most - n))
            if not more:  # a deterministic source: nothing more to draw
                break
            n = self.grow(alive, leader, n, more)
            alive = [leader]
        for c in alive:
            self.drop(c, "" if c is leader else "behind the leader")
        ordered = tuple(self.standing[c.name] for c in self.entrants if c.name in self.standing)
        return RaceResult(leader, verdict, ordered, self.sets[RUNNING], self.sets[leader.name], self.checks[leader.name],
                          n, judge.k)

    def lead(self, alive: Sequence[Candidate]) -> Candidate | None:
        """The best of `alive` by its gain among those that keep the policy (None: none does)."""
        feasible = []
        for c in alive:
            self.checks[c.name] = self.policy(c)
            if self.checks[c.name].holds:
                feasible.append(c)
        return max(feasible, key=lambda c: self.gains(c.name)[0], default=None)

    def grow(self, alive: Sequence[Candidate], leader: Candidate, n: int, more: list[Trace]) -> int:
        """The sample count once the running config and the `leader` are scored on `more` too;
        the rest of `alive` leave."""
        for c in alive:
            if c is not leader:
                self.drop(c, f"behind the leader on {n} samples")
        self.extend((self.running, leader), more)
        return n + len(more)

    def no_leader(self, alive: Sequence[Candidate], n: int, k: float) -> RaceResult:
        """The result when no candidate of `alive` keeps the policy: the running config stays.
        The standings go in the order the candidates left."""
        for c in alive:
            self.drop(c, "breaks the policy: " + "; ".join(self.checks[c.name].violations))
        best = max(alive, key=lambda c: self.gains(c.name)[0], default=None)
        why = ("no candidate but the running config is left" if best is None else
               f"every candidate left breaks the operator's policy (the best, {best.name}, "
               f"{self.gains(best.name)[0]:+.2%})")
        return RaceResult(None, Verdict(False, 0.0, 0.0, why), tuple(self.standing.values()), self.sets[RUNNING],
                          None, None, n, k)


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


def futile(verdict: Verdict, n: int, most: int, judge: Guardrail) -> bool:
    """Whether more samples cannot make `judge` deploy: the gain is below its margin, or even
    the full budget's smaller standard error (s.e. x sqrt(n / most), the gains' spread staying
    what it is) would leave it within its ``k`` of them. Growing the samples costs two
    simulations each; a gain this close to the noise is not worth them."""
    if verdict.gain <= judge.margin:
        return True
    return verdict.gain <= judge.k * verdict.spread * math.sqrt(n / most)
