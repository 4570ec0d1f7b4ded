"""The adaptive loop: at each period boundary (or on drift) fit, sample, tune, compare, deploy or keep."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..cluster import ClusterSpec, fit_to_cluster
from ..jsonable import jsonable
from ..policies import Policy, get_policy
from ..sim.metrics import Metrics
from ..space import Config, ConfigError, Subspace
from ..trace.table import Trace
from ..tune import ExecutionConfig, Objective, SearchConfig, TuneError
from .config import (
    DAY,
    ROUND_SEED_STRIDE,
    VALIDATION_SEED_OFFSET,
    LoopConfig,
    check_sample_counts,
    round_seed_of,
)
from .constraints import PolicySearch
from .drift import DriftReport, DriftTest, Profile, profile
from .errors import AdaptError
from .guardrail import Guardrail, Verdict, knob_shares, smallest_change
from .observe import Observation, carried_over
from .portfolio import Budget, candidates, milder_variants, race
from .scoring import Score, score
from .sources import WorkloadSource, concat
from .trigger import ContentionTrigger, Queue

if TYPE_CHECKING:
    from ..tune import TrialCheck

__all__ = ["best_within_policy", "Controller", "ControllerMemory", "Decision", "RoundTuner", "TrialRecord", "TunerFactory", "TuningOutcome",
           "default_tuner_factory", "policy_class", "round_workloads", "round_seed_of", "check_sample_counts",
           "VALIDATION_SEED_OFFSET", "ROUND_SEED_STRIDE"]

# a memory's round count: each round's seeds derive from it (`round_seed_of`) and must stay below
# 2**32; a round a minute for a million rounds is two years
MAX_ROUNDS = 1_000_000
PORTFOLIO_SCREEN = 4  # samples every portfolio candidate is scored on before the clearly worse go
WARM_KEEP = 3  # a round is warm-started from the running config and the last WARM_KEEP winners
PRIOR_KEEP = 3  # the trials of the last PRIOR_KEEP rounds go to the tuner (screening pools them)


@dataclass
class Decision:
    """One round of the loop and its evidence."""

    time: float
    trigger: str  # "period", "first round" or "early round" (inside period 0), or "drift: <which test fired>"
    deployed: bool
    config: Config  # the config running after this decision
    candidate: Config | None  # the tuner's best (None if the round could not tune)
    predicted_gain: float  # mean relative paired gain of candidate over running (0.05 = 5% better)
    spread: float  # standard error of that mean over the sampled workloads
    samples: int
    running_value: float
    candidate_value: float
    knobs_changed: dict[str, tuple[Any, Any]]  # knob -> (running, candidate)
    reason: str
    tuning_seconds: float
    tuning_cost: dict[str, float] | None = None  # as the tuner reports it (trials, simulations, ...)
    causal_graph: list[list[Any]] | None = None  # [source, target, directed] edges of screening
    screened_knobs: dict[str, Any] | None = None  # knob frozen by screening -> its value
    drift: dict[str, float] = field(default_factory=dict)
    history_jobs: int = 0
    imputed_durations: int = 0
    # How the guardrail's values were measured: "fresh" (samples the tuner did not see, with
    # `validation_seeds`) or "tuning" (the tuner's own workloads: a deterministic source has no others).
    validation: str = "tuning"
    validation_seeds: list[int] = field(default_factory=list)
    # with `Controller(smallest_change=True)`: the winner's knobs put back to their running
    # values because they carried none of the gain, and each kept knob's share of the gain
    dropped_knobs: list[str] = field(default_factory=list)
    knob_shares: dict[str, float] = field(default_factory=dict)
    # with the portfolio (`LoopConfig.portfolio`): each candidate's paired gain over the running
    # config on the samples it was scored on (`portfolio.Standing`), the leader's name, the
    # guardrail's k for the number compared, and the leader's effects per account and GPU-size
    # class (`constraints.Effect`) with what broke the operator's policy
    portfolio: list[dict[str, Any]] = field(default_factory=list)
    leader: str = ""
    guard_k: float | None = None
    guard_samples: int = 0  # the samples the guardrail decided on (0: it did not decide)
    effects: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    # with the search held to the policy (`LoopConfig.search_policy`): how many of the search's
    # trials kept it on the search's samples (None: the trials were not checked)
    search_within_policy: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["knobs_changed"] = {k: list(v) for k, v in self.knobs_changed.items()}
        return jsonable(d)


@dataclass(frozen=True)
class ControllerMemory:
    """What a `Controller` carries from one round to the next (`Controller.memory`, `restore`),
    as plain data that survives JSON exactly (floats as Python writes them, NaN included): the
    live agent keeps it in its store, so that a round in a new process decides as the same round
    of one long-running loop."""

    policy: str
    rounds: int  # rounds decided so far: the next round's seeds derive from this index
    winners: tuple[dict[str, Any], ...]  # the last rounds' winners, oldest first (warm starts)
    prior: tuple[tuple[dict[str, Any], ...], ...]  # the last rounds' trials (`Trial.to_dict`)
    reference: dict[str, Any] | None  # the drift reference: the last tuned window's `Profile`
    last_round: float | None  # when the last round ran (its observation's now)
    queue: dict[str, Any] | None = None  # the queue the last round saw (`trigger.Queue`)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=_plain)

    @classmethod
    def from_json(cls, text: str) -> ControllerMemory:
        """The memory `to_json` wrote; `AdaptError` when `text` is not one."""
        try:
            d = json.loads(text)
            rounds = d["rounds"]
            if isinstance(rounds, bool) or not isinstance(rounds, int) or \
                    not 0 <= rounds < MAX_ROUNDS:
                raise ValueError(f"rounds {rounds!r} is not a count of rounds")
            return cls(policy=str(d["policy"]), rounds=int(d["rounds"]),
                       winners=tuple(dict(w) for w in d["winners"]),
                       prior=tuple(tuple(dict(t) for t in g) for g in d["prior"]),
                       reference=None if d["reference"] is None else dict(d["reference"]),
                       last_round=None if d["last_round"] is None else float(d["last_round"]),
                       # (a memory stored before the contention trigger has none)
                       queue=None if d.get("queue") is None else dict(d["queue"]))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise AdaptError(f"controller memory: not one this version wrote ({e})") from None


def _plain(x: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists (for `json.dumps`)."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON")


# ------------------------------------------------------------------ what the loop needs from a tuner

class TrialRecord(Protocol):
    """One trial of a tuning round, as the loop reads it (`autosched.tune.Trial` is one)."""

    @property
    def state(self) -> str: ...  # "complete", "failed" or "pruned"
    @property
    def config(self) -> Config: ...
    @property
    def metrics(self) -> Sequence[Metrics]: ...  # one per workload, in the order given
    @property
    def value(self) -> float | None: ...  # the objective over the workloads (None: not complete)
    @property
    def check(self) -> float | None: ...  # the tune's `check` value (<= 0: kept; None: unchecked)


class TuningOutcome(Protocol):
    """What a round's tuning returns (`autosched.tune.TuneResult` is one)."""

    @property
    def best_config(self) -> Config | None: ...  # None: no trial completed
    @property
    def trials(self) -> Sequence[TrialRecord]: ...
    @property
    def cost(self) -> Mapping[str, float]: ...  # trials, simulations, seconds
    @property
    def graph(self) -> Sequence[tuple[str, str, bool]]: ...  # causal edges (source, target, directed)
    @property
    def screened_knobs(self) -> Mapping[str, Any]: ...  # knob frozen by screening -> its value


class RoundTuner(Protocol):
    """A tuner for one round: search on the round's workloads, and score a given config on them."""

    def tune(self, workloads: Sequence[Trace], warm_start: Sequence[Mapping[str, Any]] | None = None,
             progress: Callable[[int, int], None] | None = None,
             prior: Sequence[Sequence[Any]] | None = None,
             check: TrialCheck | None = None) -> TuningOutcome: ...
    # prior: the trials of earlier rounds (one group per round, as their outcomes gave them); a
    # tuner may pool them for screening (`autosched.tune.Tuner` does) or ignore them.
    # check: the operator's policy as the search's constraint (`constraints.PolicySearch`); a
    # tuner that takes it gives each trial its value as ``check`` (`autosched.tune.Tuner` does,
    # from the simulations it runs) and may steer by it; one that cannot leaves ``check`` None.

    def evaluate(self, policy_name: str, config: Mapping[str, Any],
                 workloads: Sequence[Trace]) -> tuple[float, list[Metrics]]: ...


class TunerFactory(Protocol):
    """Makes a round's tuner; `autosched.tune.Tuner` itself is one (this is its constructor).

    `policy` is what the controller was given: a policy's name, or a `Policy` class (a view of a
    policy, such as the live agent's with its fixed knobs pinned and its managed ones bounded;
    `Tuner` takes a class as well as a name)."""

    def __call__(self, policy: str | type[Policy], cluster: ClusterSpec, objective: Objective,
                 search: SearchConfig, execution: ExecutionConfig) -> RoundTuner: ...


def default_tuner_factory(policy: str | type[Policy], cluster: ClusterSpec, objective: Objective,
                          search: SearchConfig, execution: ExecutionConfig) -> RoundTuner:
    """`autosched.tune.Tuner`, imported on first use (Optuna is slow to import)."""
    from ..tune import Tuner

    return Tuner(policy, cluster, objective, search, execution)


def policy_class(policy: str | type[Policy]) -> type[Policy]:
    """The class of a policy given by name or as a class."""
    return get_policy(policy) if isinstance(policy, str) else policy


class Controller:
    """Keeps one policy's config tuned for the coming period.

    ``decide(obs)`` runs a round: evaluation workloads for [now, now + period) come from `source`
    (a workload model fitted on ``obs.history``, the replayed history, or, for the oracle, the real
    future), prefixed by the jobs the cluster carries over (``obs.backlog``). The tuner searches,
    warm-started from the running config and the previous rounds' winners, and given the trials of
    the last `prior_keep` rounds (causal screening pools them: one round's budget is too small for
    a graph of its own); the winner and the
    running config are then scored, paired, on FRESH workloads from the same source (other seeds,
    the same fitted history) that the tuner never saw, and the `Guardrail` decides: judging the
    winner on the workloads it was selected on would reward its luck on them (the winner's curse).
    A deterministic source (replay, the real future: no ``validation_workloads``) has no other
    workloads to give; its winner is judged on the tuning workloads.
    ``check_drift(obs)`` says whether the last `drift_window` moved away from the window of the
    last tuning (no drift round within `drift_window` of the last round).

    What the loop does is `config` (a `LoopConfig`: period, budget, metric, guardrail, drift,
    backlog, seed, screening; checked when it was made). The rest is how this controller runs:
    `policy` is the policy tuned, a name or a `Policy` class (None: ``config.policy``; a class is
    a view of that policy, e.g. the live agent's with its fixed knobs pinned); `initial_config` the
    running config to start from (default: the policy's defaults); `subspace` the part of the
    space every round searches (None: all of it; the live agent's and ``run --live-knobs``' come
    from `autosched.export.live.live_subspace`); `tuner_factory` makes each
    round's tuner (default: `autosched.tune.Tuner`), with ``config.search`` and a seed per round
    derived from ``config.seed``, and `execution` (workers, executor, ...). ``execution.study`` must
    be unset (refused): a study file belongs to one problem, and every round tunes on new workloads.
    With `smallest_change` (the live agent's), a deployed winner is first cut to the knobs that
    carry its gain, on the guardrail's workloads (`guardrail.smallest_change`). `baseline` is the
    operator's own config (default: `initial_config`): with ``config.cumulative_policy`` the race
    holds a candidate to the operator's policy against it as well as against the running config.
    The contention trigger (``config.trigger``) is `trigger` (None: `ContentionTrigger`'s
    defaults) and asks for a round from `contention_gap` after the last one (None:
    `drift_window`, as `autosched run` checks once a day). The live agent checks at every poll
    from the last round on (0): the trigger itself asks for the queue to double past what that
    round saw, so one burst costs one round.
    """

    def __init__(self, config: LoopConfig, cluster: ClusterSpec, source: WorkloadSource, *,
                 policy: str | type[Policy] | None = None, initial_config: Mapping[str, Any] | None = None,
                 tuner_factory: TunerFactory | None = None, execution: ExecutionConfig | None = None,
                 subspace: Subspace | None = None, drift_window: float = DAY, prior_keep: int = PRIOR_KEEP,
                 smallest_change: bool = False, contention_gap: float | None = None,
                 trigger: ContentionTrigger | None = None, baseline: Mapping[str, Any] | None = None):
        if not isinstance(config, LoopConfig):
            raise AdaptError(f"controller: {type(config).__name__} is not a LoopConfig")
        if not isinstance(source, WorkloadSource):
            raise AdaptError(f"controller: {type(source).__name__} is not a WorkloadSource (it needs workloads, "
                             "seeds, validation_workloads and validation_seeds)")
        if not drift_window > 0 or prior_keep < 0:
            raise AdaptError(f"controller: drift window must be longer than 0 and prior_keep >= 0 (got "
                             f"{drift_window:g} s and {prior_keep})")
        if contention_gap is not None and not contention_gap >= 0:
            raise AdaptError(f"controller: contention gap must be >= 0 (got {contention_gap:g} s)")
        check_sample_counts(len(source.seeds(0)), len(source.validation_seeds(0)))
        self.config = config
        self.policy: str | type[Policy] = config.policy if policy is None else policy
        cls = policy_class(self.policy)
        self.policy_name = cls.name  # what a tuner's trials and evaluations call it
        # The name the memory is kept under: the policy as the caller named it (a class given as
        # `policy` is a view of ``config.policy``).
        self.policy_ref = self.policy if isinstance(self.policy, str) else config.policy
        self.space = cls.space
        self.cluster = cluster
        self.source = source
        self.period = config.period
        self.objective = config.objective()
        self.running: Config = self.space.validate(initial_config or {})
        # the operator's own config: with `cumulative_policy` a change keeps the policy against it
        # as well as against the running config, so that small changes cannot add up past it
        self.baseline: Config = self.space.validate(baseline) if baseline is not None else dict(self.running)
        if config.pins:  # the operator's pins: held at the running values, in every search
            subspace = (subspace or Subspace()).with_pins({k: self.running[k] for k in config.pins})
        self.search = config.search if subspace is None else replace(config.search, subspace=subspace)
        # the part of the space a round searches: a warm start or a cut-down winner outside it
        # (a bound added since, a running value outside an operator's bound) is none of its
        # configs; the portfolio's archetypes are laid over it
        self.searched = self.space if subspace is None else self.space.restrict(subspace)
        self.constraints = config.constraints(cluster)
        self.execution = execution or ExecutionConfig()
        if self.execution.study is not None:
            raise TuneError(f"controller: study {self.execution.study} holds one problem, and every round "
                            "tunes on new workloads; tune each round in memory (no study file)")
        self.guardrail = config.guardrail()
        self.drift = DriftTest() if config.drift else None
        self.trigger = (trigger or ContentionTrigger()) if config.trigger else None
        self.drift_window = drift_window
        self.contention_gap = drift_window if contention_gap is None else contention_gap
        self.tuner_factory: TunerFactory = tuner_factory or default_tuner_factory
        self.warm_keep = WARM_KEEP
        self.smallest_change = smallest_change
        self.decisions: list[Decision] = []
        self.progress: Callable[[int, int], None] | None = None  # (trials done, budget) of a round
        self._winners: list[Config] = []
        self.prior_keep = prior_keep
        self._prior: list[list[Any]] = []  # trials of the last rounds, one group per round
        self._reference: Profile | None = None
        self._queue: Queue | None = None  # the queue the last round saw
        self._last_round = -float("inf")

    # rounds decided before this object existed (`restore`): each round's seeds derive from its index
    _round_offset: int = 0

    # ------------------------------------------------------------------------------ memory

    def memory(self) -> ControllerMemory:
        """What this controller carries from one round to the next, as plain data."""
        ref = self._reference
        return ControllerMemory(
            policy=self.policy_ref, rounds=self._round_offset + len(self.decisions),
            winners=tuple(dict(w) for w in self._winners),
            prior=tuple(tuple(t.to_dict() for t in g) for g in self._prior),
            reference=None if ref is None else {
                "start": ref.start, "end": ref.end, "arrivals": ref.arrivals,
                "log_durations": ref.log_durations.tolist(), "gpu_mix": ref.gpu_mix.tolist()},
            last_round=None if math.isinf(self._last_round) else self._last_round,
            queue=None if self._queue is None else self._queue.to_dict())

    def restore(self, memory: ControllerMemory) -> None:
        """Go on from `memory` (another controller's, of the same policy): its round count, warm
        starts, pooled trials, drift reference and last round time. The running config stays this
        controller's own."""
        from ..tune import Trial

        if memory.policy != self.policy_ref:
            raise AdaptError(f"controller memory of policy {memory.policy!r} cannot serve a "
                             f"{self.policy_ref!r} controller")
        # everything is read before anything is taken: a memory that is not one (edited, damaged)
        # leaves this controller as it was (`AdaptError`)
        try:
            winners = [self.space.validate(w) for w in memory.winners]
            # a trial's to_dict keys are its fields; its metrics come back as Metrics
            prior = [[Trial(**{**t, "metrics": [Metrics(**m) for m in t["metrics"]]}) for t in g]
                     for g in memory.prior]
            for trial in (t for g in prior for t in g):
                self.space.validate(trial.config)
            ref = memory.reference
            reference = None if ref is None else Profile(
                float(ref["start"]), float(ref["end"]), int(ref["arrivals"]),
                np.asarray(ref["log_durations"], dtype=float),
                np.asarray(ref["gpu_mix"], dtype=np.int64))
            queue = None if memory.queue is None else Queue.from_dict(memory.queue)
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # ConfigError too
            raise AdaptError(f"controller memory: not one this version wrote ({e})") from None
        if reference is not None and not (reference.log_durations.ndim == 1 and
                                          reference.gpu_mix.ndim == 1 and reference.arrivals >= 0
                                          and math.isfinite(reference.start)
                                          and math.isfinite(reference.end)):
            raise AdaptError("controller memory: its drift reference is not a window's profile")
        self._round_offset = memory.rounds - len(self.decisions)
        self._winners = winners
        self._prior = prior
        self._reference = reference
        self._last_round = -float("inf") if memory.last_round is None else memory.last_round
        self._queue = queue

    # ------------------------------------------------------------------------------ drift

    def check_drift(self, obs: Observation) -> DriftReport | None:
        """A drift report if the tests ran (None: no reference yet, or tuned too recently)."""
        if self.drift is None or self._reference is None or obs.now - self._last_round < self.drift_window:
            return None
        recent = profile(obs, max(obs.start, obs.now - self.drift_window), obs.now)
        return self.drift.compare(recent, self._reference)

    def check_contention(self, obs: Observation) -> str:
        """Why a round should run now, the queue having grown since the last round saw it ("":
        no; no trigger, no round yet, or one within `contention_gap`)."""
        if self.trigger is None or obs.now - self._last_round < self.contention_gap:
            return ""
        return self.trigger.fires(Queue.of(obs), self._queue, self.cluster.gpus)

    # ------------------------------------------------------------------------------ a round

    def decide(self, obs: Observation, trigger: str = "period", drift: DriftReport | None = None,
               avoid: Callable[[Config], str] | None = None) -> Decision:
        """One round at ``obs.now`` (see the class docstring): tune on workloads for the coming
        period and let the guardrail say whether the winner replaces the running config.
        `trigger` (``period``, ``first round`` or ``early round`` inside period 0, or ``drift: ...``) and the
        `drift` report that caused it are recorded
        in the returned `Decision`, which is also appended to ``decisions``. `avoid(config)` says
        why a portfolio candidate must not be offered ("" : it may; the live agent's cooldown of
        configs an operator rejected)."""
        t0 = time.perf_counter()
        round_seed = round_seed_of(self.config.seed, self._round_offset + len(self.decisions))
        self._last_round = obs.now
        self._reference = profile(obs, obs.start, obs.now)
        self._queue = Queue.of(obs)
        workloads = self._workloads(obs, round_seed)
        base: dict[str, Any] = dict(time=obs.now, trigger=trigger, samples=len(workloads),
                                    history_jobs=len(obs.history), imputed_durations=obs.imputed,
                                    drift=dict(drift.stats) if drift else {})
        if not workloads:
            return self._keep(base, t0, "no jobs to evaluate in the coming period")
        tuner = self.tuner_factory(self.policy, self.cluster, self.objective,
                                   replace(self.search, seed=round_seed), self.execution)
        check = self._policy_search(obs)
        res = tuner.tune(workloads, warm_start=self._warm_start(), progress=self.progress,
                         prior=[list(g) for g in self._prior], check=check)
        if self.prior_keep > 0 and res.trials:
            self._prior.append(list(res.trials))
            del self._prior[:-self.prior_keep]
        evidence = dict(tuning_cost=jsonable(dict(res.cost)),
                        causal_graph=jsonable([list(e) for e in res.graph]),
                        screened_knobs=jsonable(dict(res.screened_knobs)))
        if res.best_config is None:
            return self._keep(base, t0, "tuning failed: no trial completed", **evidence)
        candidate = self.space.validate(res.best_config)
        winners = list(self._winners)
        self._remember(candidate)
        if self.config.portfolio:
            within = None
            if check is not None:
                within, base["search_within_policy"] = self._within_policy(res)
            return self._decide_portfolio(obs, round_seed, workloads, tuner, candidate, winners, base,
                                          evidence, t0, avoid, within)
        if candidate == self.running:
            return self._keep(base, t0, "the tuner's best is the running config", candidate=candidate, **evidence)
        validation: str = "tuning"
        val_seed = round_seed + VALIDATION_SEED_OFFSET
        val_seeds = self.source.validation_seeds(val_seed)
        overlap = set(val_seeds) & set(self.source.seeds(round_seed))
        if overlap:  # check_sample_counts rules it out; kept because the guarantee matters
            raise AdaptError(f"controller: validation seeds {sorted(overlap)} are also tuning seeds")
        fresh = self._workloads(obs, val_seed, fresh=True)
        if fresh:
            workloads, validation = fresh, "fresh"
        if validation == "fresh":
            m_run = tuner.evaluate(self.policy_name, self.running, workloads)[1]
            m_cand = tuner.evaluate(self.policy_name, candidate, workloads)[1]
        else:
            m_run = _trial_metrics(res, self.running) or tuner.evaluate(self.policy_name, self.running, workloads)[1]
            m_cand = _trial_metrics(res, candidate) or tuner.evaluate(self.policy_name, candidate, workloads)[1]
        metric = self.objective.metric
        run_vals = [float(getattr(m, metric)) for m in m_run]
        cand_vals = [float(getattr(m, metric)) for m in m_cand]
        verdict = self.guardrail.judge(run_vals, cand_vals, self.objective.minimize)
        dropped: list[str] = []
        shares: dict[str, float] = {}
        if verdict.deploy and self.smallest_change:
            candidate, cand_vals, verdict, dropped, shares = self._smallest(
                tuner, workloads, candidate, run_vals, cand_vals, verdict)
        return self._conclude(base, t0, candidate, run_vals, cand_vals, verdict, dropped, shares,
                              validation=validation, validation_seeds=val_seeds if validation == "fresh" else [],
                              **evidence)

    def _decide_portfolio(self, obs: Observation, round_seed: int, tuning: list[Trace], tuner: RoundTuner,
                          best: Config, winners: list[Config], base: dict[str, Any], evidence: dict[str, Any],
                          t0: float, avoid: Callable[[Config], str] | None = None,
                          within: Config | None = None) -> Decision:
        """The round's portfolio raced on the guardrail's samples (`portfolio.race`): the
        leader, if the guardrail passes it, replaces the running config. `within`: the search's
        best within the policy, a candidate beside the search's best."""
        cfg = self.config
        val_seed = round_seed + VALIDATION_SEED_OFFSET
        fresh = bool(self.source.validation_seeds(val_seed))
        drawn: list[int] = []  # the seeds of the samples drawn, in order
        pool: list[Trace] = []  # their workloads (an empty sample is left out)

        def draw(start: int, count: int) -> list[Trace]:
            if not fresh:  # a deterministic source: its one workload set, once
                return list(tuning) if start == 0 else []
            seeds = [val_seed + i for i in range(start, start + count)]
            drawn.extend(seeds)
            got = self._workloads(obs, val_seed, seeds=seeds)
            pool.extend(got)
            return got

        cls = policy_class(self.policy)

        def scorer(config: Config, work: Sequence[Trace]) -> list[Score]:
            return [score(cls, config, w, self.cluster, obs.now, self.objective.metric) for w in work]

        screen = min(PORTFOLIO_SCREEN, cfg.validation_samples)
        budget = Budget(screen, cfg.validation_samples, cfg.most_validation_samples)
        port = candidates(self.searched, self.running, winners, best, within, rules=self.constraints)
        held = [(c, avoid(c.config)) for c in port[1:]] if avoid is not None else []
        port = [c for c in port if not any(c is h for h, why in held if why)]
        result = race(port, draw, scorer, budget, self.guardrail, self.constraints, self.objective.minimize,
                      milder=milder_variants(self.searched, self.running) if self.config.milder else None,
                      reference=self.baseline if self.config.cumulative_policy else None)
        verdict, leader = result.verdict, result.leader
        rows = [s.to_dict() for s in result.standings]
        rows += [{"name": c.name, "gain": None, "se": None, "samples": 0, "dropped": why} for c, why in held if why]
        extra: dict[str, Any] = dict(portfolio=rows, validation="fresh" if fresh else "tuning",
                     validation_seeds=drawn, guard_k=result.k, guard_samples=result.samples,
                     effects=[e.to_dict() for e in result.check.effects] if result.check else [],
                     violations=[r["dropped"] for r in rows if r["dropped"].startswith("breaks")])
        if leader is None or result.scores is None:
            return self._keep(base, t0, verdict.reason, candidate=best, **evidence, **extra)
        candidate = leader.config
        run_vals, cand_vals = result.running.values, result.scores.values
        dropped: list[str] = []
        shares: dict[str, float] = {}
        if verdict.deploy and self.smallest_change:
            work = pool if fresh else list(tuning)

            def values(config: dict[str, Any]) -> list[float] | None:
                try:
                    valid = self.searched.validate(config)
                except ConfigError:
                    return None
                return [s.value for s in scorer(valid, work)]

            judge = Guardrail(result.k, self.guardrail.margin, self.guardrail.max_loss)
            candidate, cand_vals, verdict, dropped, shares = self._cut(values, judge, candidate, run_vals,
                                                                       cand_vals, verdict)
        return self._conclude(base, t0, candidate, run_vals, cand_vals, verdict, dropped, shares,
                              leader=leader.name, **evidence, **extra)

    def _policy_search(self, obs: Observation) -> PolicySearch | None:
        """The round's search held to the operator's policy against the running config
        (`LoopConfig.search_policy`, with the portfolio: the race is where the policy is
        checked, and where the search's best within it is offered); None: the search ranks on
        the objective alone."""
        if not (self.config.search_policy and self.config.portfolio):
            return None
        return PolicySearch(self.constraints, dict(self.running), self.cluster, obs.now, self.objective.metric)

    def _within_policy(self, res: TuningOutcome) -> tuple[Config | None, int]:
        """`best_within_policy` of the round's search, validated as a config of the policy."""
        best, kept = best_within_policy(res.trials, self.objective.minimize)
        return (None if best is None else self.space.validate(best)), kept

    def _conclude(self, base: dict[str, Any], t0: float, candidate: Config, run_vals: list[float],
                  cand_vals: list[float], verdict: Verdict, dropped: list[str], shares: dict[str, float],
                  **evidence: Any) -> Decision:
        """The round's decision on its judged candidate: deployed (it becomes the running config)
        when the verdict says so, recorded either way."""
        changed = {k: (self.running[k], candidate[k]) for k in self.space.names if self.running[k] != candidate[k]}
        if verdict.deploy:
            self.running = candidate
        d = Decision(**base, deployed=verdict.deploy, config=dict(self.running), candidate=candidate,
                     predicted_gain=verdict.gain, spread=verdict.spread,
                     running_value=_mean(run_vals), candidate_value=_mean(cand_vals), knobs_changed=changed,
                     reason=verdict.reason, tuning_seconds=time.perf_counter() - t0, dropped_knobs=dropped,
                     knob_shares=shares, **evidence)
        self.decisions.append(d)
        return d

    def _smallest(self, tuner: RoundTuner, workloads: list[Trace], candidate: Config,
                  run_vals: list[float], cand_vals: list[float], verdict: Verdict
                  ) -> tuple[Config, list[float], Verdict, list[str], dict[str, float]]:
        """The winner without the knobs that carry none of its gain, on the guardrail's own
        workloads (`guardrail.smallest_change`), when the guardrail still deploys it; with each
        kept knob's share of the gain."""
        def score(config: dict[str, Any]) -> list[float] | None:
            # a knob goes back to its running value only inside what the round searches: a
            # running value outside an operator's bound stays replaced
            try:
                self.searched.validate(config)
                valid = self.space.validate(config)
            except ConfigError:
                return None
            return [float(getattr(m, self.objective.metric))
                    for m in tuner.evaluate(self.policy_name, valid, workloads)[1]]

        return self._cut(score, self.guardrail, candidate, run_vals, cand_vals, verdict)

    def _cut(self, score: Callable[[dict[str, Any]], list[float] | None], judge: Guardrail, candidate: Config,
             run_vals: list[float], cand_vals: list[float], verdict: Verdict
             ) -> tuple[Config, list[float], Verdict, list[str], dict[str, float]]:
        """`_smallest` with the workloads' `score` and the `judge` given."""
        minimize = self.objective.minimize
        red = smallest_change(self.running, candidate, run_vals, cand_vals, score, minimize)
        if red.dropped:
            cut = judge.judge(run_vals, list(red.values), minimize)
            if cut.deploy:
                return (self.space.validate(red.config), list(red.values), cut, list(red.dropped),
                        red.shares)
        return candidate, cand_vals, verdict, [], knob_shares(
            self.running, candidate, run_vals, cand_vals, score, minimize)

    def _workloads(self, obs: Observation, seed: int, fresh: bool = False,
                   seeds: list[int] | None = None) -> list[Trace]:
        return round_workloads(self.source, obs, self.period, self.cluster, seed,
                               carry_backlog=self.config.carry_backlog, fresh=fresh,
                               frame_running=self.config.frame_running, seeds=seeds)

    def _warm_start(self) -> list[Config]:
        """The running config and the last winners, those the round searches (`searched`)."""
        seen, out = set(), []
        for c in [self.running, *reversed(self._winners)]:
            key = tuple(sorted(c.items()))
            if key not in seen and self._searches(c):
                seen.add(key)
                out.append(dict(c))
        return out

    def _searches(self, config: Config) -> bool:
        try:
            self.searched.validate(config)
        except ConfigError:
            return False
        return True

    def _remember(self, config: Config) -> None:
        self._winners.append(config)
        del self._winners[:-self.warm_keep]

    def _keep(self, base: dict, t0: float, reason: str, candidate: Config | None = None, **evidence) -> Decision:
        d = Decision(**base, deployed=False, config=dict(self.running), candidate=candidate,
                     predicted_gain=0.0, spread=0.0, running_value=float("nan"), candidate_value=float("nan"),
                     knobs_changed={}, reason=reason, tuning_seconds=time.perf_counter() - t0, **evidence)
        self.decisions.append(d)
        return d


def round_workloads(source: WorkloadSource, obs: Observation, period: float, cluster: ClusterSpec,
                    seed: int, carry_backlog: bool = True, fresh: bool = False,
                    frame_running: bool = True, seeds: list[int] | None = None) -> list[Trace]:
    """The workloads a `Controller` evaluates configs on at ``obs.now``: `source`'s workloads for
    [now, now + period) drawn with `seed` (its validation workloads if `fresh`), each prefixed by
    the jobs the cluster carries over (`carried_over`: ``obs.backlog``, the running ones framed
    as running with `frame_running`; if `carry_backlog`) and fitted to `cluster`; empty ones
    left out; with `seeds`, `source`'s fresh samples drawn with exactly those seeds (the
    portfolio's growing sample set). Public so that benchmarks score exactly what a round tunes
    on."""
    if seeds is not None:
        drawn = source.draw(obs, period, seeds)
    else:
        drawn = (source.validation_workloads if fresh else source.workloads)(obs, period, seed)
    backlog = carried_over(obs, frame_running)
    out = []
    for w in drawn:
        if carry_backlog and len(backlog):
            w = concat(backlog, w)
        w, _ = fit_to_cluster(w, cluster)
        if len(w):
            out.append(w)
    return out


def best_within_policy(trials: Sequence[TrialRecord], minimize: bool = True) -> tuple[Config | None, int]:
    """The best config on the objective among the complete `trials` whose ``check`` kept the
    operator's policy (<= 0), and how many kept it (None, 0: none did, or none was checked)."""
    kept = [t for t in trials if t.state == "complete" and t.value is not None
            and t.check is not None and t.check <= 0]
    if not kept:
        return None, 0
    sign = 1.0 if minimize else -1.0
    best = min(kept, key=lambda t: sign * float(t.value))  # type: ignore[arg-type]
    return dict(best.config), len(kept)


def _trial_metrics(res: TuningOutcome, config: Config) -> list[Metrics] | None:
    """Per-workload metrics of `config` if the tuner already simulated it on these workloads (the
    simulator is deterministic, so running it again would give the same numbers)."""
    for t in res.trials:
        if t.state == "complete" and t.config == config and t.metrics:
            return list(t.metrics)
    return None


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)
