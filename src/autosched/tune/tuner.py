"""The tuner: Bayesian optimisation (Optuna) over a policy's knobs, with causal knob screening.

    tuner = Tuner("tiresias", cluster, Objective("avg_jct"), SearchConfig(budget=40, seed=0))
    result = tuner.tune(workloads)           # workloads: Traces already fitted to the cluster

The study is Optuna's, driven through its public ask/tell and storage APIs; with
``ExecutionConfig(study=PATH)`` it lives in SQLite, so a killed run resumes where it stopped
(finished trials are kept; a trial that was running when the run died is marked failed and not
counted against the budget). `tune.study` holds the rules for the file itself.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from ..cluster import ClusterSpec
from ..policies import Policy
from ..sim import Metrics
from ..space import Bool, Categorical, Config, Float, Int, Knob, dump_config
from ..trace.table import Trace
from .config import SAMPLERS, STUDY_NAME, ExecutionConfig, SearchConfig, TuneError
from .evaluate import ConfigScore, Evaluator, SimFn, TrialCheck
from .executor import TrialRun, make_executor
from .objective import Objective
from .screening import Screening, gaussian_ranks, screen
from .searchspace import SearchSpace
from .study import StudyError, StudyLock, check_identity, check_study_file, check_study_path, problem_identity

__all__ = ["Tuner", "TuneResult", "Trial", "TrialState", "TuneError", "SearchConfig", "ExecutionConfig",
           "SAMPLERS", "STUDY_NAME", "STATES"]


class TrialState(str, Enum):
    """How a trial ended; each value is the word results and reports have always used, and
    equals that text."""

    COMPLETE = "complete"
    FAILED = "failed"  # the simulation raised, or timed out
    PRUNED = "pruned"


STATES = tuple(s.value for s in TrialState)
# Optuna's finished states, as a Trial says them
_OF_OPTUNA = {"COMPLETE": TrialState.COMPLETE, "FAIL": TrialState.FAILED, "PRUNED": TrialState.PRUNED}
# A secondary knob whose probe moves the objective by less than this (relative) is frozen: less
# than the search's noise between neighbouring configs on the traces of docs/tuning.md.
PROBE_TOLERANCE = 0.01


class Step(Enum):
    """A one-off step of a search, between its design and the rest of its budget."""

    SCREEN = "screen"  # causal screening on the design's trials
    PROBE = "probe"  # a structured space's probes of its secondary knobs, queued
    VERDICT = "verdict"  # the probes judged: which secondary knobs stay searched


@dataclass(frozen=True)
class Phases:
    """Where one search is, as a value: its design (the first `n_init` trials), then at most one
    of a causal screening (`screen`) or a structured space's probes (`probe`: queued once the
    design is in, judged once they are in, at `probe_end`), then the rest of the budget. A step
    is due only with no trial in flight, so that what it reads is fixed by the seed."""

    n_init: int
    screen: bool = False
    probe: bool = False
    probe_end: int | None = None  # trials done once the probes are in (None: not queued yet)

    def due(self, done: int, in_flight: bool) -> Step | None:
        """The step to take now, with `done` trials told (None: ask trials)."""
        if in_flight or done < self.n_init:
            return None
        if self.screen:
            return Step.SCREEN
        if self.probe and self.probe_end is None:
            return Step.PROBE
        if self.probe and self.probe_end is not None and done >= self.probe_end:
            return Step.VERDICT
        return None

    def limit(self, budget: int) -> int:
        """Trials that may be asked so far: the design's while a screening or the probes wait
        for it, else the whole budget."""
        return self.n_init if self.screen or (self.probe and self.probe_end is None) else budget


@dataclass
class Trial:
    number: int
    policy: str
    config: Config
    value: float | None
    metrics: list[Metrics]
    state: TrialState
    error: str | None = None
    duration: float = 0.0
    violations: list[float] = field(default_factory=list)
    intermediates: dict[str, float] = field(default_factory=dict)
    attempts: int = 1  # simulations of the workloads (0: a repeat, result reused)
    repeat_of: int | None = None  # a config already simulated in this study: that trial's number
    check: float | None = None  # a search with a `TrialCheck`: its value (<= 0: kept); None: unchecked
    # the check's reductions of this trial's job records (kept in memory for a repeat, never stored)
    reduced: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        self.state = TrialState(self.state)  # as JSON holds it too ("complete"): a controller's memory

    @property
    def feasible(self) -> bool:
        return self.state is TrialState.COMPLETE and all(v <= 0 for v in self.violations)

    @property
    def score(self) -> float:
        """The objective value of a complete trial (a failed or pruned trial has none)."""
        if self.value is None:
            raise TuneError(f"trial {self.number} is {self.state.value}: it has no objective value")
        return self.value

    def evaluation(self) -> ConfigScore:
        """This complete trial's result, to reuse for a repeat of its config."""
        return ConfigScore(self.score, tuple(self.metrics), tuple(self.violations), dict(self.intermediates),
                           self.reduced)

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "policy": self.policy, "config": self.config, "value": self.value,
                "state": self.state.value, "error": self.error, "duration": self.duration,
                "violations": self.violations, "intermediates": self.intermediates,
                "attempts": self.attempts, "repeat_of": self.repeat_of, "check": self.check,
                "metrics": [m.to_dict() for m in self.metrics]}


@dataclass
class TuneResult:
    objective: Objective
    best_policy: str | None
    best_config: Config | None
    best_value: float
    default_value: float
    best_metrics: list[Metrics]
    default_metrics: list[Metrics]
    trials: list[Trial]
    screened_knobs: dict[str, Any]  # frozen knob -> value
    searched_knobs: list[str]
    graph: list[tuple[str, str, bool]]  # (source, target, directed)
    effects: dict[str, float]
    cost: dict[str, float]
    screening: Screening | None = None
    feasible: bool = True

    @property
    def improvement(self) -> float:
        """Relative gain of the best config over the default (positive = better)."""
        if not self.default_value or math.isnan(self.default_value):
            return math.nan
        gain = (self.default_value - self.best_value) / abs(self.default_value)
        return gain if self.objective.minimize else -gain

    def best_config_json(self) -> str:
        """The best config in the format `autosched simulate --config` reads."""
        if self.best_policy is None or self.best_config is None:
            raise TuneError("no trial completed: there is no best config")
        return dump_config(self.best_policy, self.best_config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective.to_dict(),
            "best_policy": self.best_policy, "best_config": self.best_config,
            "best_value": self.best_value, "default_value": self.default_value,
            "improvement": self.improvement, "feasible": self.feasible,
            "best_metrics": [m.to_dict() for m in self.best_metrics],
            "default_metrics": [m.to_dict() for m in self.default_metrics],
            "screened_knobs": self.screened_knobs, "searched_knobs": self.searched_knobs,
            "graph": [list(e) for e in self.graph], "effects": self.effects, "cost": self.cost,
            "screening": self.screening.to_dict() if self.screening else None,
            "trials": [t.to_dict() for t in self.trials],
        }


class Tuner:
    """Finds a good config of one policy (or the best policy and its config) on given workloads.

    ``Tuner(policy, cluster, objective, search=SearchConfig(...), execution=ExecutionConfig(...))``;
    then ``tune(workloads)`` runs the search and ``evaluate(policy, config, workloads)`` scores
    one config. Its constructor has the signature of the adaptive loop's `TunerFactory`.
    """

    def __init__(self, policy: "str | type[Policy] | Sequence[str | type[Policy]]", cluster: ClusterSpec,
                 objective: Objective | None = None, search: SearchConfig | None = None,
                 execution: ExecutionConfig | None = None, *, simulator: SimFn | None = None):
        self.search = search or SearchConfig()
        self.space = SearchSpace.of(policy, self.search.subspace)
        self.cluster = cluster
        self.objective = objective or Objective()
        self.execution = execution or ExecutionConfig()
        self.simulator = simulator
        # Complete trials of earlier searches, one group per search (`tune`'s `prior`), for screening.
        self._prior: list[list[Trial]] = []
        # A search's check (`tune`'s `check`), its reference's reductions, and the simulations of
        # a reference no trial asked for
        self._check: TrialCheck | None = None
        self._ref_reduced: tuple[Any, ...] | None = None
        self._unasked = 0
        if self.search.sampler == "gp":
            _require_torch()
        if self.search.screening:
            _require_causal_learn()

    # ---------------------------------------------------------------------------- evaluation

    def evaluator(self, workloads: Sequence[Trace], check: TrialCheck | None = None) -> Evaluator:
        """What scores one config on `workloads` (what an executor ships to its workers), with
        `check`'s reductions of each simulation's job records."""
        if not workloads:
            raise TuneError("no workloads to evaluate on")
        return Evaluator(self.cluster, tuple(workloads), self.objective,
                         {p.name: p for p in self.space.policies}, self.simulator, check)

    def evaluate(self, policy_name: str, config: Mapping[str, Any], workloads: Sequence[Trace]) -> tuple[float, list[Metrics]]:
        """Score one config on the workloads (in this process). Any config of the policy: the
        running one a search is compared with may lie outside what it searches."""
        config = self.space.policy(policy_name).space.validate(config)
        ev = self.evaluator(workloads)(policy_name, config)
        return ev.value, list(ev.metrics)

    # ------------------------------------------------------------------------------- search

    def initial_trials(self, warm: int = 0) -> int:
        """Trials before screening: about three per knob (PC's independence tests need them to
        see a moderate effect; measured on the test double in tests/test_tune.py), at least 10,
        at most half the budget. A space that declares how to search it (`structured_design`)
        has a design of its own."""
        if self.search.initial_design is not None:
            return self.search.initial_design
        if self._structured:
            return self.structured_design(warm)
        return max(1, min(self.search.budget // 2, self._screening_trials()))

    def structured_design(self, warm: int = 0) -> int:
        """The first trials of a structured space: the start config, `warm` warm-start configs
        and the archetypes, then a Latin hypercube of max(2, budget / 8) more, all within half
        the budget unless the seeded configs alone are more."""
        seeded = 1 + warm + len(self.space.archetypes(self.space.names[0]))
        return max(seeded, min(seeded + max(2, self.search.budget // 8), self.search.budget // 2))

    @property
    def _structured(self) -> bool:
        return self.space.structured(self.space.names[0])

    def _screening_trials(self) -> int:
        """Trials a causal graph wants, whatever the budget."""
        if self.search.initial_design is not None:
            return self.search.initial_design
        knobs = sum(len(self.space.config_space(p.name).knobs) - len(self.space.config_space(p.name).pinned)
                    for p in self.space.policies)
        return max(10, 3 * knobs + 2)

    def tune(self, workloads: Sequence[Trace], warm_start: "Sequence[Mapping[str, Any] | Trial] | None" = None,
             progress: Callable[[int, int], None] | None = None,
             prior: "Sequence[Sequence[Trial]] | None" = None, check: TrialCheck | None = None) -> TuneResult:
        """Search, and return the best config with the evidence. With a study file, the file is
        held for the whole run (a second run on it is refused) and a killed run resumes.

        `prior`: trials of earlier searches of the same policy, one group per search (each group
        scored on its own workloads, e.g. an adaptive loop's earlier rounds). Screening pools them
        with this search's trials, each group's objective and intermediates ranked within the group
        (values on different workloads are not comparable, rankings are), so that a search too
        small for a causal graph of its own can still screen.

        `check`: a constraint computed from each trial's job records against its reference
        config (`TrialCheck`; the first policy's). The reference is simulated first (its result
        is then reused by the trial that asks for it, as a repeat is); each trial's value is
        stored as its ``check`` (a user attribute of the study's trial) and given to the
        sampler as a constraint, so that TPE (and GP) model where the feasible configs lie. The
        best config stays the objective's best; the caller picks among the trials that keep the
        check. Trials of a resumed study that were told before this run have no check."""
        path = self.execution.study
        if path is None:
            return self._tune(workloads, warm_start, progress, prior, check)
        check_study_path(path)
        with StudyLock(path):
            check_study_file(path)
            return self._tune(workloads, warm_start, progress, prior, check)

    def _tune(self, workloads: Sequence[Trace], warm_start: "Sequence[Mapping[str, Any] | Trial] | None",
              progress: Callable[[int, int], None] | None,
              prior: "Sequence[Sequence[Trial]] | None" = None, check: TrialCheck | None = None) -> TuneResult:
        t0 = time.perf_counter()
        evaluator = self.evaluator(workloads, check)
        self._n_workloads = len(workloads)
        study, storage = self._open_study(workloads)
        budget = self.search.budget
        self.space.frozen = {}  # a Tuner may tune more than once; screening belongs to its study
        screening = self._stored_screening(study)
        if screening is not None:
            self._apply(screening)
        _recover_interrupted(study, storage)
        n_init = self.initial_trials(len(warm_start or []))
        self._prior = [[t for t in g if t.state is TrialState.COMPLETE] for g in (prior or [])]
        n_prior = sum(len(g) for g in self._prior)
        # With enough trials from earlier searches, screen once this search's warm-start trials are
        # in (they rank the known winners on this search's workloads) instead of after a design.
        n_seed = 1 + len(warm_start or [])
        if not self._structured and n_prior and n_prior + n_seed >= self._screening_trials() and n_seed < budget:
            n_init = n_seed
            design = 0
        else:
            design = n_init
        # A structured space screens its secondary knobs by probes (`_probe`), not by a graph.
        phases = Phases(n_init, screen=(self.search.screening and not self.space.multi and not self._structured
                                        and screening is None and budget > n_init),
                        probe=self._structured and screening is None and budget > n_init)
        if not _finished(study):
            self._seed_trials(study, warm_start or [], n_init if self._structured else design if phases.screen else 0)
        known = {_config_key(t.policy, t.config): t for t in _trials(study) if t.state is TrialState.COMPLETE}
        executor = make_executor(self.execution.executor, self.execution.workers,
                                 self.execution.trial_timeout, self.execution.address)
        executor.start(evaluator)
        self._check, self._ref_reduced, self._unasked = check, None, 0
        ref_key, ref_run = None, None
        if check is not None:
            ref_name = self.space.names[0]
            # the full space: the running config may lie outside what the search searches (a bound)
            ref_config = self.space.policy(ref_name).space.validate(check.reference)
            ref_key, ref_run = _config_key(ref_name, ref_config), self._run_reference(executor, ref_name, ref_config)
        # Trials asked and not yet told, oldest first. Results are told strictly in this order,
        # one at a time, and a new trial is asked right after each tell: what the sampler has
        # seen at each ask is then fixed by the seed and the worker count, not by which worker
        # happens to finish first (docs/tuning.md, "Reproducibility").
        asked: dict[int, tuple[optuna.Trial, str, Config]] = {}
        ready: dict[int, TrialRun] = {}
        done = len(_finished(study))
        stall = 0  # completed trials since the last new best (counted once screening is done)
        try:
            while True:
                while (step := phases.due(done, bool(asked))) is not None:
                    if step is Step.SCREEN:
                        screening, phases = self._screen(study), replace(phases, screen=False)
                    elif step is Step.PROBE:
                        phases = replace(phases, probe_end=done + self._probe(study, budget - done))
                    else:
                        screening, phases = self._probe_verdict(study), replace(phases, probe=False)
                limit = phases.limit(budget)
                while len(asked) < executor.workers and done + len(asked) < limit:
                    trial = study.ask()
                    name, config = self.space.sample(trial)
                    trial.set_user_attr("policy", name)
                    trial.set_user_attr("config", config)
                    asked[trial.number] = (trial, name, config)
                    key = _config_key(name, config)
                    same = known.get(key)
                    if same is not None:  # the simulator is deterministic: reuse, do not re-run
                        trial.set_user_attr("repeat_of", same.number)
                        ready[trial.number] = TrialRun(trial.number, same.evaluation(), None, 0.0, attempts=0)
                    elif ref_run is not None and key == ref_key:  # the reference, simulated first
                        ready[trial.number] = replace(ref_run, key=trial.number)
                        ref_run = None
                    else:
                        executor.submit(trial.number, name, config)
                if not asked:
                    break
                head = next(iter(asked))
                while head not in ready:
                    outs = executor.collect()
                    if not outs:  # an executor never drops a submitted trial; never spin on one that did
                        raise RuntimeError(f"the executor lost trial {head}")
                    for out in outs:
                        ready[out.key] = out
                trial, name, config = asked.pop(head)
                out = ready.pop(head)
                self._tell(study, trial, out, config)
                done += 1
                if out.evaluation is not None:
                    key = _config_key(name, config)
                    if key not in known:
                        known[key] = _trial_of(name, config, trial.number, out)
                    if screening is not None:
                        stall = 0 if self._improves(study, trial.number) else stall + 1
                if (screening is not None and screening.frozen and screening.unfrozen_at is None
                        and self.search.patience is not None and stall >= self.search.patience):
                    screening.unfrozen_at = done
                    study.set_user_attr("screening", screening.to_dict())
                    self._apply(screening)
                if progress is not None:
                    progress(done, budget)
        finally:
            executor.close()
            for trial, _, _ in asked.values():  # interrupted (Ctrl-C): not counted, not lost
                trial.set_user_attr("interrupted", True)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
        if ref_run is not None:
            self._unasked = ref_run.attempts * len(workloads)
        return self._result(study, screening, time.perf_counter() - t0)

    def _run_reference(self, executor: Any, name: str, config: Config) -> TrialRun | None:
        """The check's reference config simulated before any trial (key -1), its reductions
        kept; None when it failed (the trials then go unchecked)."""
        executor.submit(-1, name, config)
        out: TrialRun | None = None
        while out is None:
            got = executor.collect()
            if not got:
                raise RuntimeError("the executor lost the check's reference run")
            out = next((o for o in got if o.key == -1), None)
        if out.evaluation is None:
            return None
        self._ref_reduced = out.evaluation.reduced
        return out

    # --------------------------------------------------------------------------- the study

    def _sampler(self, n_startup: int, seed: int | None) -> optuna.samplers.BaseSampler:
        # Constraints reach the samplers through Trial.set_constraint (see _tell).
        sampler = self.search.sampler
        if sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if sampler == "gp":
            _require_torch()
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup,
                                             warn_independent_sampling=False, deterministic_objective=True)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)

    def _open_study(self, workloads: Sequence[Trace]) -> tuple[optuna.Study, optuna.storages.BaseStorage]:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # With screening, the initial design is the sampler's random start-up phase; so is a
        # structured space's design (the sampler models from the trial after it).
        n_startup = (self.initial_trials() if self.search.screening and not self.space.multi else
                     self.structured_design() if self._structured else 10)
        path, name = self.execution.study, self.execution.study_name
        storage = _storage(path)
        seed = self.search.seed
        existing = _n_trials(storage, name)
        if existing and seed is not None:
            # A resumed run must not replay the random stream of the run it continues (that
            # repeats its first random configs exactly); it is still a function of the seed and
            # of where the study stopped, so resuming from the same point gives the same trials.
            seed = int(np.random.SeedSequence([seed, existing]).generate_state(1)[0])
        try:
            study = optuna.create_study(storage=storage, study_name=name, load_if_exists=True,
                                        direction=self.objective.direction, sampler=self._sampler(n_startup, seed))
        except ValueError as e:  # e.g. a study of that name made to maximise, now to minimise
            raise StudyError(f"study {path}: {e}" if path is not None else str(e)) from None
        problem = {"policies": list(self.space.names), "objective": self.objective.to_dict(),
                   "cluster": self.cluster.describe()}
        if path is not None:  # an in-memory study is new each time: nothing to check
            problem = problem_identity(self.space.policies, self.cluster, self.objective, workloads)
            if self.search.subspace is not None:  # a study of part of the space is another problem
                problem["subspace"] = dataclasses.asdict(self.search.subspace)
        stored = study.user_attrs.get("problem")
        if stored is None:
            study.set_user_attr("problem", problem)
        else:
            check_identity(path, stored, problem)
        return study, storage

    def _seed_trials(self, study: optuna.Study, warm_start: "Sequence[Mapping[str, Any] | Trial]", design: int) -> None:
        """Default config(s) first, then the warm-start configs (previous round's best), then a
        structured space's archetypes, then (for screening, or a structured space) a
        space-filling initial design that fills up the first `design` trials."""
        first = [(p.name, self.space.config_space(p.name).default()) for p in self.space.policies]
        first += [self._warm_item(item) for item in warm_start]
        name = self.space.names[0]
        if self._structured:
            first += [(name, c) for c in self.space.archetypes(name)]
        first += [(name, c) for c in self.space.design(name, design - len(first), self.search.seed)]
        for name, config in first:
            study.enqueue_trial(self.space.params(name, config), skip_if_exists=True)
    def _warm_item(self, item: "Mapping[str, Any] | Trial") -> tuple[str, dict[str, Any]]:
        if isinstance(item, Trial):  # a previous round's trial
            return self._warm_item({"policy": item.policy, "knobs": item.config})
        if "knobs" in item:
            name = item.get("policy") or self.space.names[0]
            knobs = item["knobs"]
        else:
            name, knobs = self.space.names[0], item
        if name not in self.space.names:
            raise TuneError(f"warm-start config is for policy {name!r}, not one of {', '.join(self.space.names)}")
        return name, dict(knobs)

    def _tell(self, study: optuna.Study, trial: optuna.Trial, out: TrialRun, config: Config) -> None:
        trial.set_user_attr("duration", out.duration)
        trial.set_user_attr("attempts", out.attempts)
        ev: ConfigScore | None = out.evaluation
        if ev is None:
            trial.set_user_attr("error", out.error or "unknown error")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        trial.set_user_attr("metrics", [m.to_dict() for m in ev.metrics])
        trial.set_user_attr("violations", list(ev.violations))
        for c, v in zip(self.objective.constraints, ev.violations):
            trial.set_constraint(str(c), v)  # <= 0 is feasible; TPE and GP model the constraints
        if self._check is not None and self._ref_reduced is not None and ev.reduced:
            value = float(self._check.value(self._ref_reduced, ev.reduced, config))
            trial.set_user_attr("check", value)
            trial.set_constraint("check", value)
        trial.set_user_attr("intermediates", ev.intermediates)
        study.tell(trial, ev.value)

    # --------------------------------------------------------------------------- screening

    def _screen(self, study: optuna.Study) -> Screening | None:
        trials = [t for t in _trials(study) if t.state is TrialState.COMPLETE]
        name = self.space.names[0]
        trials = [t for t in trials if t.policy == name]
        if not trials:
            return None
        space = self.space.config_space(name)
        best = _best(trials, self.objective)
        groups = [trials] + [[t for t in g if t.policy == name and t.value is not None]
                             for g in self._prior]
        groups = [g for g in groups if g]
        pooled = [t for g in groups for t in g]
        inter_names = sorted(set.intersection(*(set(t.intermediates) for t in pooled)))
        if len(groups) == 1:
            inter = {k: [t.intermediates[k] for t in trials] for k in inter_names}
            values = [t.score for t in trials]
        else:  # each search scored its trials on its own workloads: pool within-search ranks
            inter = {k: [x for g in groups for x in _within(g, _intermediate(k))] for k in inter_names}
            values = [x for g in groups for x in _within(g, lambda t: t.score)]
        result = screen(space, [t.config for t in pooled], inter, values, self.objective.metric, best.config)
        study.set_user_attr("screening", result.to_dict())
        self._apply(result)
        return result

    def _probe(self, study: optuna.Study, left: int) -> int:
        """A structured space's short first stage: one trial per secondary knob, the best config
        so far with that knob moved to the far end of its searched range (a bool flipped), queued
        now. Returns how many; none when `left` trials cannot hold them and one more."""
        name = self.space.names[0]
        space = self.space.config_space(name)
        complete = [t for t in _trials(study) if t.state is TrialState.COMPLETE]
        if not complete:
            return 0
        best = _best(complete, self.objective)
        tried = {t.user_attrs["probe"] for t in study.get_trials(deepcopy=False) if "probe" in t.user_attrs}
        probes = []
        for knob in space:
            if (knob.name not in space.secondary or knob.name in space.pinned or knob.name in tried
                    or not space.is_active(knob, best.config)):
                continue
            moved = _far_end(knob, best.config[knob.name])
            if moved is not None:
                probes.append((knob.name, {**best.config, knob.name: moved}))
        if len(probes) + 1 > left:
            return 0
        for knob_name, config in probes:
            study.enqueue_trial(self.space.params(name, config),
                                user_attrs={"probe": knob_name, "probe_of": best.number})
        return len(probes)

    def _probe_verdict(self, study: optuna.Study) -> Screening | None:
        """Freeze each probed knob whose probe moved the objective by less than
        `PROBE_TOLERANCE` of the config it was moved from, at its value in the best trial so
        far; keep searching the others (and any whose probe failed)."""
        finished = {t.number: t for t in _trials(study)}
        probes = [(t.user_attrs["probe"], t.user_attrs["probe_of"], t.number)
                  for t in study.get_trials(deepcopy=False) if "probe" in t.user_attrs and t.number in finished]
        if not probes:
            return None
        effects: dict[str, float] = {}
        relevant = []
        for knob, of, number in probes:
            base, probe = finished.get(of), finished[number]
            if base is None or base.value is None or probe.value is None or base.value == 0:
                relevant.append(knob)  # cannot tell: keep searching it
                continue
            effects[knob] = (probe.value - base.value) / abs(base.value)
            if abs(effects[knob]) >= PROBE_TOLERANCE:
                relevant.append(knob)
        best = _best([t for t in finished.values() if t.state is TrialState.COMPLETE], self.objective)
        knobs = [k for k, _, _ in probes]
        result = Screening(knobs, [], self.objective.metric, [], effects, relevant,
                           {k: best.config[k] for k in knobs if k not in relevant}, len(finished),
                           PROBE_TOLERANCE, note="one probe per secondary knob, moved to the far end of its "
                           "searched range at the best config of the first trials", method="probes")
        study.set_user_attr("screening", result.to_dict())
        self._apply(result)
        return result

    def _stored_screening(self, study: optuna.Study) -> Screening | None:
        d = study.user_attrs.get("screening")
        return Screening.from_dict(d) if d else None

    def _apply(self, screening: Screening) -> None:
        frozen = screening.frozen if screening.unfrozen_at is None else {}
        self.space.frozen = {self.space.names[0]: dict(frozen)}

    def _improves(self, study: optuna.Study, number: int) -> bool:
        """Is trial `number` the best feasible trial so far?"""
        trials = [t for t in _trials(study) if t.state is TrialState.COMPLETE]
        return bool(trials) and _best(trials, self.objective).number == number

    # ------------------------------------------------------------------------------ result

    def _result(self, study: optuna.Study, screening: Screening | None, seconds: float) -> TuneResult:
        trials = _trials(study)
        complete = [t for t in trials if t.state is TrialState.COMPLETE]
        best = _best(complete, self.objective) if complete else None
        first = self.space.policies[0]
        default_cfg = self.space.config_space(first.name).default()
        default = next((t for t in complete if t.policy == first.name and t.config == default_cfg), None)
        # Knobs still frozen at the end (none if a stalled reduced search gave them back).
        frozen = dict(screening.frozen) if screening and screening.unfrozen_at is None else {}
        searched = [self.space.param_name(p.name, k) for p in self.space.policies
                    for k in self.space.searched(p.name)]
        run = [t for t in trials if t.state is not TrialState.PRUNED]
        cost = {"trials": len(run),
                "simulations": sum(t.attempts for t in run) * self._n_workloads + self._unasked,
                "trial_seconds": sum(t.duration for t in run), "wall_seconds": seconds, "seconds": seconds}
        return TuneResult(
            objective=self.objective,
            best_policy=best.policy if best else None,
            best_config=best.config if best else None,
            best_value=best.score if best else math.nan,
            default_value=default.score if default else math.nan,
            best_metrics=best.metrics if best else [],
            default_metrics=default.metrics if default else [],
            trials=trials, screened_knobs=frozen, searched_knobs=searched,
            graph=[(e.source, e.target, e.directed) for e in screening.edges] if screening else [],
            effects=dict(screening.effects) if screening else {},
            cost=cost, screening=screening, feasible=best.feasible if best else False,
        )


def _far_end(knob: Knob, value: Any) -> Any:
    """The value of `knob` farthest from `value` within its searched range (log-scaled knobs in
    log space; a bool's other value; a categorical's first other choice); None if there is none."""
    if isinstance(knob, (Int, Float)):
        lo, hi = knob.searched()
        if lo == hi:
            return None
        if knob.log and lo > 0 and value > 0:
            return lo if math.log(value / lo) > math.log(hi / value) else hi
        return lo if value - lo > hi - value else hi
    if isinstance(knob, Bool):
        return not value
    if isinstance(knob, Categorical):
        return next((c for c in knob.choices if c != value), None)
    return None


def _require_causal_learn() -> None:
    try:
        import causallearn  # noqa: F401
    except ImportError:
        raise TuneError("causal knob screening needs causal-learn, a dependency of autosched that is not "
                        "installed: pip install causal-learn (or tune without screening)") from None


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise TuneError("the GP sampler needs PyTorch, which is not installed: "
                        "pip install 'autosched[gp]' (or use the tpe sampler)") from None


def _finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Trials that count against the budget: finished, and not cut short by a killed run."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)
    return [t for t in study.get_trials(deepcopy=False, states=states) if not t.user_attrs.get("interrupted")]


def _storage(path: Path | None) -> optuna.storages.BaseStorage:
    """The study's storage: SQLite at `path` (checked by `check_study_path` first), or memory."""
    if path is None:
        return optuna.storages.InMemoryStorage()
    import sqlalchemy.exc

    for attempt in range(3):
        try:
            return optuna.storages.RDBStorage(f"sqlite:///{path.resolve()}",
                                              engine_kwargs={"connect_args": {"timeout": 30}})
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as e:
            # Another process that opens the file at the same moment (a reader such as
            # `optuna.load_study`, a dashboard, or a second run that will then find the study
            # locked) may create Optuna's schema between our check and ours: SQLite says "table
            # ... already exists", or refuses the second schema-version row ("UNIQUE constraint
            # failed: alembic_version..."). The schema is then there and a second open succeeds.
            raced = "already exists" in str(e) or "alembic_version" in str(e)
            if not raced or attempt == 2:
                raise _unopenable(path, e) from None
            time.sleep(0.1)
        except (sqlalchemy.exc.SQLAlchemyError, RuntimeError) as e:  # damaged, or another schema
            raise _unopenable(path, e) from None
    raise AssertionError("unreachable")


def _unopenable(path: Path, e: Exception) -> StudyError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return StudyError(f"study {path}: cannot be opened as a study ({first})")


def _n_trials(storage: optuna.storages.BaseStorage, name: str) -> int:
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return 0
    return storage.get_n_trials(study_id)


def _recover_interrupted(study: optuna.Study, storage: optuna.storages.BaseStorage) -> None:
    """Trials left RUNNING by a killed run: mark them failed (not counted) and ask for their
    config again first, unless the study already has a finished or queued trial with it.

    Safe only because this run holds the study's lock: no other live run has RUNNING trials."""
    states = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)
    running = [t for t in trials if t.state == states.RUNNING]
    if not running:
        return
    study_id = storage.get_study_id_from_name(study.study_name)
    have = [t.params for t in trials if t.state in (states.COMPLETE, states.WAITING)
            or (t.state == states.FAIL and not t.user_attrs.get("interrupted"))]
    for t in running:
        storage.set_trial_user_attr(storage.get_trial_id_from_study_id_trial_number(study_id, t.number),
                                    "interrupted", True)
        study.tell(t.number, state=states.FAIL)
        if t.params and t.params not in have:
            study.enqueue_trial(t.params)
            have.append(t.params)


def _config_key(policy: str, config: Mapping[str, Any]) -> str:
    return json.dumps([policy, config], sort_keys=True)


def _trial_of(policy: str, config: Config, number: int, out: TrialRun) -> Trial:
    ev = out.evaluation
    assert ev is not None
    return Trial(number, policy, config, ev.value, list(ev.metrics), TrialState.COMPLETE,
                 violations=list(ev.violations), intermediates=dict(ev.intermediates), reduced=ev.reduced)


def _trials(study: optuna.Study) -> list[Trial]:
    out = []
    for t in _finished(study):
        state = _OF_OPTUNA[t.state.name]
        a = t.user_attrs
        out.append(Trial(
            number=t.number, policy=a.get("policy", ""), config=a.get("config", {}),
            value=t.value if state is TrialState.COMPLETE else None,
            metrics=[Metrics(**m) for m in a.get("metrics", [])], state=state,
            error=a.get("error"), duration=float(a.get("duration", 0.0)),
            violations=list(a.get("violations", [])), intermediates=dict(a.get("intermediates", {})),
            attempts=int(a.get("attempts", 1)), repeat_of=a.get("repeat_of"),
            check=None if a.get("check") is None else float(a["check"]),
        ))
    return out


def _within(group: Sequence[Trial], value: Callable[[Trial], float]) -> list[float]:
    """A group's values as normal scores of their ranks within the group (0 for a lone trial)."""
    x = np.asarray([value(t) for t in group], dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return [0.0] * len(x)
    ranks: list[float] = gaussian_ranks(x).tolist()
    return ranks


def _intermediate(name: str) -> Callable[[Trial], float]:
    """A trial's value of intermediate `name`."""
    return lambda t: t.intermediates[name]


def _best(trials: Sequence[Trial], objective: Objective) -> Trial:
    """The best feasible trial; if none is feasible, the one that breaks its constraints least."""
    feasible = [t for t in trials if t.feasible]
    sign = 1.0 if objective.minimize else -1.0
    if feasible:
        return min(feasible, key=lambda t: sign * t.score)
    return min(trials, key=lambda t: (sum(max(0.0, v) for v in t.violations), sign * t.score))
