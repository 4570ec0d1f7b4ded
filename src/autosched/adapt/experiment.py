"""Replay a real trace end to end while a strategy reconfigures the simulated scheduler.

Each strategy gets one `Simulator` over the whole real trace. At every decision time t the
simulator is run up to t (``sim.run(until=t)``), the controller sees only what a real one would
(`observe`: jobs submitted by t, durations only of jobs finished by t), and a deployed config is
switched in with ``sim.reconfigure`` (queued and running jobs carry over). Strategies:

- ``default``: the policy's default config, fixed;
- ``autosched``: workload model + tuner + guardrail, at each period boundary and on drift;
- ``last_period``: no workload model; the tuner evaluates on the last period replayed;
- ``oracle_static``: ORACLE, the best fixed config in hindsight (tuned on the whole real trace);
- ``oracle_period``: ORACLE, tuned at each boundary on the real jobs of the coming period;
- ``oracle_static_policy`` (on request): ORACLE, oracle_static kept to the operator's policy, the
  best fixed config in hindsight whose every period holds the policy against the default
  (`oracle`); the bound of a loop that is held to the policy.

The oracles search with ``Settings.oracle_budget`` trials (default 10x a round's budget): an
oracle tuned as little as the strategies is one more noisy strategy, and can come out worse than
the strategies it should bound. Their searches are cached on disk (`cache`), so re-runs are cheap,
and they use one seed (`ORACLE_SEED`) whatever the run's seed: the bound that a run's seeds are
measured against is the same for all of them (and is searched once).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..cluster import ClusterSpec, cpu_sizing
from ..jsonable import jsonable
from ..policies import Policy, get_policy
from ..sim import JobRecords, Metrics, Simulator, compute_metrics
from ..space import Config, Subspace
from ..trace.table import Trace
from ..tune import ExecutionConfig, Objective, SearchConfig
from .cache import cached_factory
from .config import DAY, LoopConfig
from .controller import PRIOR_KEEP, Controller, Decision, RoundTuner, TunerFactory, default_tuner_factory, policy_class
from .drift import GPU_CLASS_NAMES, gpu_classes
from .errors import AdaptError
from .observe import observe
from .oracle import PolicyOracleTuner, period_breaks, period_scores
from .scoring import Score
from .sources import FutureSource, ReplaySource

STRATEGIES = ("default", "autosched", "last_period", "oracle_static", "oracle_period")  # run by default
KNOWN_STRATEGIES = (*STRATEGIES, "oracle_static_policy")  # the others run when asked for
ORACLES = frozenset({"oracle_static", "oracle_period", "oracle_static_policy"})
DESCRIPTIONS = {
    "default": "the policy's default config, fixed",
    "autosched": "workload model + tuner + guardrail, each period and daily from the first round to the first "
                 "boundary (and on drift, when drift checks are on)",
    "last_period": "tuned on the last period replayed (no workload model)",
    "oracle_static": "ORACLE: best fixed config in hindsight, tuned on the whole real trace",
    "oracle_period": "ORACLE: tuned each period on the real jobs of that period",
    "oracle_static_policy": "ORACLE: best fixed config in hindsight that keeps to the operator's policy against "
                            "the default in every period",
}
ORACLE_FACTOR = 10  # an oracle's search: this many times a round's budget
FIRST_DECISION = 3 / 7  # Settings.first_decision: day 3 of a 7-day first period
# Settings.early_rounds: on six traces x 8 seeds autosched's average JCT fell on every trace
# (paired: 0.3-3.3%; on cluster06 and the sample within 1-2 s.e.), its share of oracle_static's gain
# rose from 77.4% to 84.1%, and the traces with no week worse than the default by more than 2%
# went from 3 to 5 (docs/history.md, "early rounds in period 0"). last_period, which gets the
# same rounds, gained as much.
EARLY_ROUNDS = True
# What each of check_times' moments is; a round's kind is its Decision's trigger.
PERIOD, FIRST_ROUND, EARLY_ROUND, CHECK = "period", "first round", "early round", "check"
ORACLE_SEED = 0  # the oracles' searches and observations use this seed for every run seed

Progress = Callable[[str, float, float], None]  # (what is happening, done, total)


@dataclass(frozen=True, kw_only=True)
class Settings(LoopConfig):
    """`autosched run`'s settings: the loop's (`LoopConfig`, its defaults) plus the experiment's:
    when its rounds come inside the first period, the oracles' searches, and where trials run."""

    oracle_budget: int | None = None  # trials of each oracle search; None: ORACLE_FACTOR x budget
    check_every: float = DAY  # how often the drift tests run between boundaries, and the early rounds
    # A first round this fraction of the first period after the start (3/7: day 3 of a week), on
    # the history seen so far; None: the first round is at the first boundary, and period 0 runs
    # the default whatever happens. On six traces x 3 seeds it raised autosched's share of
    # oracle_static's gain from 59.9% to 73.2% (docs/history.md, "a first round inside period 0").
    first_decision: float | None = FIRST_DECISION
    # After the first round, a round every `check_every` until half a `check_every` before the
    # first boundary ("early round"; the boundary has its own round): in period 0 each day adds a
    # third or more to a young history, and a week heavier than the first days showed is seen
    # before the boundary (benchmarks/period0_rounds.py). EARLY_ROUNDS says what it measured; no
    # early rounds without a first round. Their number grows with the period (a 30-day period:
    # up to 29 rounds before its first boundary).
    early_rounds: bool = EARLY_ROUNDS
    # Where each round's trials run (workers, ...).
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    # The part of the policy's space every strategy searches (None: all of it); `run --live-knobs`
    # gives the live agent's (`autosched.export.live.live_subspace`), its pinned knobs at the
    # cluster's values from the start.
    subspace: Subspace | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.check_every <= 0:
            raise AdaptError(f"the check interval must be longer than 0 (got {self.check_every:g} s)")
        if self.first_decision is not None and not 0 < first_round_offset(self) < self.period:
            raise AdaptError(f"the first decision must come after the start and before the first period "
                             f"boundary, to the second: {self.first_decision:g} of a period of "
                             f"{self.period:g} s is not")
        object.__setattr__(self, "oracle_budget", self.oracle_trials)  # as given, or its default
        if self.oracle_trials < 1:
            raise AdaptError(f"oracle budget must be at least 1 (got {self.oracle_trials})")

    @property
    def oracle_trials(self) -> int:
        """Trials of each oracle search: `oracle_budget`, or ORACLE_FACTOR x `budget` when not given."""
        return ORACLE_FACTOR * self.budget if self.oracle_budget is None else self.oracle_budget

    def to_dict(self) -> dict[str, Any]:
        """As `run --json` gives it: every field, with the search settings whole (``search``)."""
        d = asdict(self)
        del d["screening"], d["subspace"]  # in "search"
        d["search"] = asdict(replace(self.search, subspace=self.subspace))
        return {**{k: d.pop(k) for k in JSON_ORDER if k in d}, **d}


# The order of the settings in `run --json` (kept: scripts and saved results read it); a setting
# not listed comes after these.
JSON_ORDER = ("policy", "period", "history", "budget", "oracle_budget", "samples", "validation_samples",
              "level_sd", "model", "with_replay", "metric", "seed", "drift", "check_every", "first_decision",
              "early_rounds", "guard_k", "guard_margin", "guard_max_loss", "carry_backlog", "backlog_history",
              "search", "execution")


def first_round_offset(settings: Settings) -> float:
    """Seconds from the start to the first round inside period 0 (`Settings.first_decision`)."""
    return float(round((settings.first_decision or 0.0) * settings.period))


@dataclass
class PeriodResult:
    index: int
    start: float
    end: float
    metrics: Metrics
    # the period's jobs per account (average wait) and per GPU-size class (p95 wait): what the
    # operator's policy protects (`scoring.Score`; None: no job)
    waits: Score | None = None
    # the operator's policy in this period against the default's same period (`oracle.
    # period_violations`): what it breaks (None: not checked, e.g. no default in the run)
    breaks: tuple[str, ...] | None = None

    def breakdown(self) -> dict[str, Any]:
        """``accounts`` and ``sizes`` as `run --json` gives them."""
        w = self.waits
        if w is None:
            return {"accounts": {}, "sizes": {}}
        return {"accounts": {a: {"jobs": w.account_jobs[a], "avg_queue": w.account_wait[a],
                                 "usage": w.account_usage.get(a, 0.0)} for a in w.account_wait},
                "sizes": {k: {"jobs": w.size_jobs[k], "p95_queue": w.size_p95_wait[k]} for k in w.size_p95_wait}}


@dataclass
class StrategyResult:
    name: str
    oracle: bool
    description: str
    metrics: Metrics
    periods: list[PeriodResult]
    timeline: list[tuple[float, Config]]  # (time, config deployed then)
    decisions: list[Decision]
    seconds: float
    cpu_seconds: float = 0.0  # this process's CPU time (with --workers 1, the strategy's whole cost)

    def to_dict(self) -> dict[str, Any]:
        m = self.metrics
        return jsonable({
            "oracle": self.oracle, "description": self.description,
            "avg_jct": m.avg_jct, "p99_jct": m.p99_jct, "avg_queue": m.avg_queue,
            "utilization": m.utilization, "metrics": m.to_dict(),
            "periods": [{"index": p.index, "start": p.start, "end": p.end, "avg_jct": p.metrics.avg_jct,
                         "p99_jct": p.metrics.p99_jct, "avg_queue": p.metrics.avg_queue,
                         "utilization": p.metrics.utilization, "jobs": p.metrics.jobs, **p.breakdown(),
                         **({} if p.breaks is None else {"policy_breaks": list(p.breaks)})}
                        for p in self.periods],
            "timeline": [{"time": t, "config": c} for t, c in self.timeline],
            "decisions": [d.to_dict() for d in self.decisions],
            "seconds": self.seconds, "cpu_seconds": self.cpu_seconds,
        })


@dataclass
class ExperimentResult:
    settings: Settings
    cluster: str
    trace: str
    jobs: int
    boundaries: list[float]
    strategies: dict[str, StrategyResult]
    workload: dict[str, Any]  # per-day drift series of the real trace (for the report)
    # how the jobs are sized in CPUs on the cluster (`autosched.cluster.cpu_sizing`)
    cpus: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Each strategy's avg JCT relative to default, and autosched's share of the oracle's gain."""
        s = self.strategies
        out: dict[str, Any] = {}
        if "default" not in s:
            return out
        base = s["default"]
        out["relative_avg_jct"] = {k: v.metrics.avg_jct / base.metrics.avg_jct for k, v in s.items()}
        if "oracle_static" in s:
            oracle = s["oracle_static"]
            out["share_of_oracle_static_gain"] = {
                k: _share(base.metrics.avg_jct, oracle.metrics.avg_jct, v.metrics.avg_jct) for k, v in s.items()}
            # Period 0 starts with no history: every strategy but oracle_static runs the default
            # there until its first round (Settings.first_decision, or the first boundary), so the
            # share above caps what a per-period strategy can reach. The same share over the jobs
            # submitted after period 0 measures the decisions with a full history behind them.
            out["share_of_oracle_static_gain_after_p0"] = {
                k: _share(_avg_jct_after_p0(base), _avg_jct_after_p0(oracle), _avg_jct_after_p0(v))
                for k, v in s.items()}
        out["worst_period_vs_default"] = {
            k: max(p.metrics.avg_jct / b.metrics.avg_jct for p, b in zip(v.periods, base.periods) if b.metrics.jobs)
            for k, v in s.items() if v.periods}
        if "oracle_static_policy" in s:
            oracle = s["oracle_static_policy"]
            out["share_of_oracle_static_policy_gain"] = {
                k: _share(base.metrics.avg_jct, oracle.metrics.avg_jct, v.metrics.avg_jct) for k, v in s.items()}
        if all(p.breaks is not None for v in s.values() for p in v.periods):
            out["periods_breaking_policy"] = {k: sum(bool(p.breaks) for p in v.periods) for k, v in s.items()}
        if "autosched" in s and "oracle_period" in s:
            out["autosched_share_of_oracle_period_gain"] = _share(
                base.metrics.avg_jct, s["oracle_period"].metrics.avg_jct, s["autosched"].metrics.avg_jct)
        if "autosched" in s and "last_period" in s:
            out["autosched_beats_last_period"] = s["autosched"].metrics.avg_jct < s["last_period"].metrics.avg_jct
        return out

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "settings": self.settings.to_dict(), "cluster": self.cluster, "trace": self.trace,
            "jobs": self.jobs, "boundaries": self.boundaries,
            "strategies": {k: v.to_dict() for k, v in self.strategies.items()},
            "summary": self.summary(), "workload": self.workload, "cpus": self.cpus,
        })


def _share(base: float | None, oracle: float | None, got: float | None) -> float | None:
    """The share of an oracle's gain over the default that a strategy got, ``(base - got) /
    (base - oracle)``; None when the oracle gained nothing or a figure is missing (no jobs)."""
    if base is None or oracle is None or got is None or not base - oracle > 0:
        return None
    return (base - got) / (base - oracle)


def _avg_jct_after_p0(r: StrategyResult) -> float | None:
    """Average JCT of the jobs submitted after period 0 (None: no such job)."""
    later = [p.metrics for p in r.periods[1:] if p.metrics.jobs]
    jobs = sum(m.jobs for m in later)
    return sum(m.avg_jct * m.jobs for m in later) / jobs if jobs else None


def _say(progress: Callable[[str, float, float], None], name: str, what: str, done: float = 0.0,
         total: float = 1.0) -> None:
    """Progress of one strategy, its name first."""
    progress(f"{name}: {what}", done, total)


def run_experiment(trace: Trace, cluster: ClusterSpec, settings: Settings = Settings(),
                   strategies: Sequence[str] = STRATEGIES, *, tuner_factory: TunerFactory | None = None,
                   model_factory: Callable[[str], Any] | None = None,
                   progress: Progress | None = None, cache: Path | None = None) -> ExperimentResult:
    """Run each strategy on the same trace (already fitted to `cluster`) and cluster. The oracles'
    searches are read from / stored in the directory `cache` (None: not cached)."""
    unknown = [s for s in strategies if s not in KNOWN_STRATEGIES]
    if unknown:
        raise AdaptError(f"unknown strategy {', '.join(unknown)}; known: {', '.join(KNOWN_STRATEGIES)}")
    get_policy(settings.policy)  # fail early on a bad name
    if len(trace) == 0:
        raise AdaptError("the trace has no jobs")
    tuner_factory = tuner_factory or default_tuner_factory
    oracle_factory = cached_factory(tuner_factory, cache)
    bounds = boundaries(trace, settings.period)
    progress = progress or (lambda what, done, total: None)
    results: dict[str, StrategyResult] = {}
    for name in strategies:
        t0, c0 = time.perf_counter(), time.process_time()
        say = functools.partial(_say, progress, name)
        # No early rounds for an oracle: each of its rounds is a search of ORACLE_FACTOR x the
        # budget, and with them the README's run took 2.6x the CPU with a cold cache. The oracles
        # bound the loop; oracle_period keeps the first round and the boundaries.
        run_settings = replace(settings, seed=ORACLE_SEED, early_rounds=False) if name in ORACLES else settings
        if name in ("oracle_static", "oracle_static_policy"):
            factory = oracle_factory if name == "oracle_static" else policy_oracle_factory(
                tuner_factory, cache, run_settings, cluster, bounds)
            config = _tune_static(trace, cluster, run_settings, factory, say)
            res = replay(trace, cluster, run_settings, bounds, initial=config, progress=say)
        elif name == "default":
            res = replay(trace, cluster, settings, bounds, progress=say)
        else:
            ctrl = make_controller(name, trace, cluster, run_settings,
                                   oracle_factory if name in ORACLES else tuner_factory, model_factory)
            res = replay(trace, cluster, run_settings, bounds, controller=ctrl, progress=say)
        records, timeline, decisions = res
        results[name] = StrategyResult(
            name, name in ORACLES, DESCRIPTIONS[name], _metrics(records, trace, cluster),
            period_metrics(records, trace, cluster, bounds), timeline, decisions, time.perf_counter() - t0,
            time.process_time() - c0)
    if "default" in results:
        constraints = settings.constraints(cluster)
        base = [p.waits for p in results["default"].periods]
        for r in results.values():
            for p, bad in zip(r.periods, period_breaks(constraints, base, [p.waits for p in r.periods])):
                p.breaks = bad
    return ExperimentResult(settings, cluster.describe(), trace.source, len(trace), bounds, results,
                            workload_series(trace, cluster), cpu_sizing(trace, cluster))


def summaries_across_seeds(seeds: Sequence[int], summaries: Sequence[dict[str, Any]],
                           names: Sequence[str]) -> dict[str, Any]:
    """Mean and sample standard deviation over runs of different seeds, from each seed's
    `ExperimentResult.summary()` (as `run --json` saves it), for strategies `names`: each
    strategy's avg JCT relative to the default and share of the oracle_static gain, and
    autosched's lead over last_period (relative JCT of last_period minus autosched's; > 0:
    autosched better), with whether that lead is larger than its spread across seeds."""
    def stats(xs: list[float]) -> dict[str, float]:
        a = np.asarray(xs, dtype=float)
        return {"mean": float(a.mean()), "sd": float(a.std(ddof=1)) if len(a) > 1 else 0.0, "n": len(a)}

    out: dict[str, Any] = {"seeds": list(seeds), "relative_avg_jct": {},
                           "share_of_oracle_static_gain": {}, "share_of_oracle_static_gain_after_p0": {}}
    for name in names:
        rel = [s["relative_avg_jct"][name] for s in summaries if name in s.get("relative_avg_jct", {})]
        if rel:
            out["relative_avg_jct"][name] = stats(rel)
        for key in ("share_of_oracle_static_gain", "share_of_oracle_static_gain_after_p0",
                    "share_of_oracle_static_policy_gain"):
            share = [s[key][name] for s in summaries if s.get(key, {}).get(name) is not None]
            if share:  # (the policy oracle's key only when a run had it)
                out.setdefault(key, {})[name] = stats(share)
    if "autosched" in names and "last_period" in names and "default" in names:
        lead = stats([s["relative_avg_jct"]["last_period"] - s["relative_avg_jct"]["autosched"] for s in summaries])
        lead["larger_than_spread"] = lead["n"] > 1 and abs(lead["mean"]) > lead["sd"]
        out["autosched_lead_over_last_period"] = lead
    return out


# What every seed of one experiment shares (the settings too, but for the seed).
# (`workload`, the trace's per-day series, tells two traces of the same path apart.)
_SAME_ACROSS_SEEDS = ("trace", "cluster", "jobs", "boundaries", "workload")


def merge_seed_runs(files: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One `run --seeds N` result from runs of the same experiment made apart (e.g. one seed per
    core, each `run --seed K --json`): `files` are (name, parsed JSON), each of one seed or
    several (``runs``). The result is what one `--seeds` run over those seeds prints: the lowest
    seed's result with its ``dropped``, the others under ``runs`` in seed order, and
    ``across_seeds`` recomputed. Raises AdaptError naming the file when the runs differ in
    anything but the seed, or repeat a seed."""
    seeds: list[tuple[int, str, dict[str, Any]]] = []
    for name, data in files:
        runs = data.get("runs", []) if isinstance(data, dict) else None
        if not isinstance(runs, list):
            raise AdaptError(f"{name}: not an experiment's result (its `runs` is not a list)")
        for k, one in enumerate([data, *runs]):
            seed = _seed_of(name, k, one)
            part = one if k == 0 or "dropped" not in data else {**one, "dropped": data["dropped"]}
            seeds.append((seed, name, part))
    if not seeds:
        raise AdaptError("no runs to merge")
    seeds.sort(key=lambda s: s[0])
    _, first_name, first = seeds[0]

    def differs(one: dict[str, Any]) -> str | None:
        for key in _SAME_ACROSS_SEEDS:
            if one[key] != first[key]:
                return key
        if list(one["strategies"]) != list(first["strategies"]):
            return "strategies"
        mine, theirs = _seedless(one["settings"]), _seedless(first["settings"])
        return next((f"settings.{k}" for k in sorted(mine.keys() | theirs.keys()) if mine.get(k) != theirs.get(k)),
                    None)

    for (seed, name, one), prev in zip(seeds[1:], seeds):
        if seed == prev[0]:
            raise AdaptError(f"{name}: seed {seed} is in {prev[1]} too; each seed may be merged once")
        if seed != prev[0] + 1:
            raise AdaptError(f"{name}: seed {seed} follows seed {prev[0]} of {prev[1]}: the seeds must be "
                             f"consecutive (one run over seeds {seeds[0][0]}..{seeds[-1][0]} has them all)")
        key = differs(one)
        if key is not None:
            raise AdaptError(f"{name}: seed {seed} is not a run of the same experiment as seed {seeds[0][0]} "
                             f"in {first_name}: they differ in {key}")
    return seeds_document(first, [one for _, _, one in seeds[1:]])


_MERGED = (*_SAME_ACROSS_SEEDS, "settings", "strategies", "summary")


def _seed_of(name: str, k: int, one: Any) -> int:
    """The seed of part `k` of file `name` (0: the file's own result, else ``runs[k - 1]``),
    checked to hold what a merge compares."""
    where = "" if k == 0 else f"runs[{k - 1}]: "
    missing = [key for key in _MERGED if not isinstance(one, dict) or key not in one]
    if missing:
        raise AdaptError(f"{name}: {where}not an experiment's result (no {', '.join(missing)})")
    seed = one["settings"].get("seed") if isinstance(one["settings"], dict) else None
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise AdaptError(f"{name}: {where}settings.seed is {seed!r}, not an integer")
    return seed


def seeds_document(first: dict[str, Any], others: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What `run --seeds N --json` prints: the first seed's result (`ExperimentResult.to_dict`,
    with the trace's ``dropped``), the other seeds' results under ``runs`` in seed order, and
    ``across_seeds`` over them all (neither, with one seed)."""
    out = {k: v for k, v in first.items() if k not in ("runs", "across_seeds")}
    if others:
        out["runs"] = [{k: v for k, v in one.items() if k not in ("dropped", "runs", "across_seeds")}
                       for one in others]
        every = [first, *others]
        out["across_seeds"] = summaries_across_seeds([int(one["settings"]["seed"]) for one in every],
                                                     [one["summary"] for one in every], list(first["strategies"]))
    return out


def _seedless(settings: dict[str, Any]) -> dict[str, Any]:
    """Saved settings without the run's seed (which the search's settings repeat)."""
    out = {k: v for k, v in settings.items() if k != "seed"}
    if isinstance(out.get("search"), dict):
        out["search"] = {k: v for k, v in out["search"].items() if k != "seed"}
    return out


def make_controller(name: str, trace: Trace, cluster: ClusterSpec, settings: Settings,
                    tuner_factory: TunerFactory, model_factory: Callable[[str], Any] | None) -> Controller:
    if name == "autosched":
        return Controller(settings, cluster, settings.model_source(model_factory), tuner_factory=tuner_factory,
                          execution=settings.execution, subspace=settings.subspace,
                          initial_config=start_config(settings))
    # The baselines deploy whatever their tuning prefers (no guardrail) and re-tune only at boundaries.
    source = ReplaySource() if name == "last_period" else FutureSource(trace)
    # (no portfolio either: they are the naive re-tuning autosched is measured against)
    config = replace(settings, guard_k=0.0, guard_margin=0.0, guard_max_loss=None, drift=False,
                     trigger=False, portfolio=False)
    if name in ORACLES:  # a large search of its own each round: no pooling of earlier rounds
        config = replace(config, budget=settings.oracle_trials)
    return Controller(config, cluster, source, tuner_factory=tuner_factory, execution=settings.execution,
                      subspace=settings.subspace, initial_config=start_config(settings),
                      prior_keep=0 if name in ORACLES else PRIOR_KEEP)


def boundaries(trace: Trace, period: float) -> list[float]:
    """Period starts from the first submission, and the end of the last (partial) period."""
    n = max(1, math.ceil((trace.end - trace.start) / period + 1e-12))
    if trace.start + n * period <= trace.end:
        n += 1
    return [trace.start + i * period for i in range(n + 1)]


def replay(trace: Trace, cluster: ClusterSpec, settings: Settings, bounds: list[float], *,
           controller: Controller | None = None, initial: Config | None = None,
           progress: Progress | None = None) -> tuple[JobRecords, list[tuple[float, Config]], list[Decision]]:
    """Simulate the whole trace; at each decision time the controller may switch the config."""
    cls = get_policy(settings.policy)
    config = cls.space.validate(initial if initial is not None else
                                (controller.running if controller else start_config(settings)))
    if controller is not None:
        controller.running = config
    sim = Simulator(trace, cluster, cls(config))
    timeline = [(bounds[0], config)]
    checks = 0 if controller is None else _decide(sim, controller, settings, bounds, timeline, progress)
    if progress:
        progress("finishing the replay", checks, checks)
    sim.run()
    return sim.records(), timeline, list(controller.decisions) if controller else []


def _decide(sim: Simulator[Policy], controller: Controller, settings: Settings, bounds: list[float],
            timeline: list[tuple[float, Config]], progress: Progress | None) -> int:
    """Run `sim` to each of `check_times`, where `controller` decides; switch `sim` to each config
    it deploys, appended to `timeline`. Returns how many checks there were."""
    checks = check_times(bounds, settings, checks=controller.drift is not None or controller.trigger is not None)
    for i, (t, kind) in enumerate(checks):
        sim.run(until=t)
        if progress:
            day = f"day {(t - bounds[0]) / DAY:.0f}"
            progress(f"{day} {'check' if kind == CHECK else 're-tuning'}", i, len(checks))
            controller.progress = lambda done, total, i=i, day=day: progress(
                f"{day} tuning, trial {done}/{total}", i + done / max(total, 1), len(checks))
        obs = observe(sim, t, max(bounds[0], t - settings.history), seed=settings.seed,
                      backlog_history=settings.backlog_history)
        if kind != CHECK:
            d = controller.decide(obs, kind)
        elif why := controller.check_contention(obs):
            d = controller.decide(obs, f"contention: {why}")
        else:
            report = controller.check_drift(obs)
            if report is None or not report.drifted:
                continue
            d = controller.decide(obs, f"drift: {report.reason}", report)
        if d.deployed:
            sim.reconfigure(d.config)
            timeline.append((t, d.config))
    return len(checks)


def start_config(settings: Settings) -> Config:
    """The config every strategy starts from (and `default` keeps): the policy's defaults, with
    the cluster's values of the knobs a search's subspace pins (``run --live-knobs --fix``)."""
    sub = settings.subspace
    return get_policy(settings.policy).space.validate(sub.config() if sub is not None else {})


def check_times(bounds: list[float], settings: Settings, checks: bool) -> list[tuple[float, str]]:
    """(time, kind), in time order: a round ("period") at each inner boundary, a "first round"
    `first_decision` into the first period (rounded to whole seconds; none when the trace has one
    period: there is nothing to re-tune), with `early_rounds` an "early round" every `check_every`
    after it while at least half a `check_every` before the first boundary (two full rounds
    seconds apart would decide on the same information), and with `checks` a "check" (of the
    queue, and of drift when it is on) every `check_every` between later boundaries."""
    inner = bounds[1:-1]
    out = [(b, PERIOD) for b in inner]
    if settings.first_decision is not None and inner:
        first = bounds[0] + first_round_offset(settings)
        out.append((first, FIRST_ROUND))
        k = 1
        while settings.early_rounds and first + k * settings.check_every <= inner[0] - settings.check_every / 2:
            out.append((first + k * settings.check_every, EARLY_ROUND))
            k += 1
    if checks and inner:
        t = inner[0] + settings.check_every
        while t < bounds[-1]:
            if all(abs(t - b) > 1e-6 for b in inner):
                out.append((t, CHECK))
            t += settings.check_every
    return sorted(out)


def policy_oracle_factory(inner: TunerFactory, cache: Path | None, settings: Settings, cluster: ClusterSpec,
                          bounds: list[float]) -> TunerFactory:
    """oracle_static_policy's tuner (`oracle.PolicyOracleTuner` over `inner`'s search), its pick
    cached in `cache` under the search's key with the policy's rules and the periods."""
    constraints = settings.constraints(cluster)
    start = start_config(settings)

    def make(policy: str | type[Policy], cluster: ClusterSpec, objective: Objective, search: SearchConfig,
             execution: ExecutionConfig) -> RoundTuner:
        cls = policy_class(policy)
        space = cls.space if search.subspace is None else cls.space.restrict(search.subspace)
        return PolicyOracleTuner(inner(policy, cluster, objective, search, execution), cls, space, cluster,
                                 objective, constraints, bounds, start)

    extra = {"oracle": "static, within the operator's policy", "constraints": repr(constraints),
             "bounds": [b - bounds[0] for b in bounds]}
    return cached_factory(make, cache, extra)


def _tune_static(trace: Trace, cluster: ClusterSpec, settings: Settings, tuner_factory: TunerFactory,
                 say: Callable[..., None]) -> Config:
    say(f"tuning one config on the whole real trace (oracle, {settings.oracle_trials} trials)")
    search = replace(settings.search, budget=settings.oracle_trials, subspace=settings.subspace)
    tuner = tuner_factory(settings.policy, cluster, settings.objective(), search, settings.execution)
    res = tuner.tune([trace], warm_start=None)
    space = get_policy(settings.policy).space
    return space.validate(res.best_config) if res.best_config is not None else start_config(settings)


def _metrics(rec: JobRecords, trace: Trace, cluster: ClusterSpec, mask: np.ndarray | None = None) -> Metrics:
    groups = trace.vc if trace.vc is not None else trace.user
    if mask is not None:
        rec = JobRecords(*(getattr(rec, f)[mask] for f in JobRecords.__dataclass_fields__))
        groups = groups[mask] if groups is not None else None
    return compute_metrics(rec, cluster.gpus, groups)


def period_metrics(rec: JobRecords, trace: Trace, cluster: ClusterSpec, bounds: list[float]) -> list[PeriodResult]:
    """Metrics of the jobs submitted in each period (they may finish after it ends)."""
    waits = period_scores(rec, trace, cluster, bounds)
    return [PeriodResult(i, a, b, _metrics(rec, trace, cluster, (rec.submit >= a) & (rec.submit < b)), waits[i])
            for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]


def workload_series(trace: Trace, cluster: ClusterSpec, bin_seconds: float = DAY) -> dict[str, Any]:
    """Per-day arrivals, offered load (GPU-seconds submitted / cluster GPU-seconds) and GPU-size mix."""
    start = trace.start
    idx = ((trace.submit_time - start) // bin_seconds).astype(np.int64)
    nbins = int(idx.max()) + 1 if len(idx) else 0
    arrivals = np.bincount(idx, minlength=nbins)
    work = np.bincount(idx, weights=trace.num_gpus * trace.duration, minlength=nbins)
    mix = np.array([gpu_classes(trace.num_gpus[idx == b]) for b in range(nbins)]).reshape(nbins, -1)
    share = mix / np.maximum(mix.sum(axis=1, keepdims=True), 1)
    return {"bin_seconds": bin_seconds, "start": start, "arrivals": arrivals.tolist(),
            "offered_load": (work / (cluster.gpus * bin_seconds)).tolist(),
            "median_log_duration": [float(np.median(np.log(trace.duration[idx == b]))) if arrivals[b] else None
                                    for b in range(nbins)],
            "gpu_mix": {name: share[:, k].tolist() for k, name in enumerate(GPU_CLASS_NAMES)}}
