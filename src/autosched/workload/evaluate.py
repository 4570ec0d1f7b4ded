"""How good is a workload model: rolling-origin evaluation on a real trace.

At each origin ``o`` every model is fitted on ``[o - history, o)`` and sampled on
``[o, o + horizon)``; the samples are compared with the real jobs of that period in two ways.

* Distribution distances (KS and Wasserstein, scipy.stats) of inter-arrival time, log duration,
  GPUs per job, and of the hour of day at which GPU-hours are submitted (the daily demand
  profile: hours 0-23 weighted by GPU-hours); total-variation distance of the per-VC job shares
  (VCs are categories, so KS does not apply); and the ratio of generated to real GPU-hours.
* Decision fidelity, which is what tuning needs: a fixed panel of configurations of a policy
  (its default plus ``panel`` drawn from its ConfigSpace with a fixed seed) is simulated on each
  generated and on the real workload. Spearman's rank correlation of the objective between the
  two, and the relative regret of the configuration that is best on the generated workload when
  run on the real one (0.05 = 5% worse than the real best of the panel).

The real next-period workload is read only to score; no model sees it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..cluster import ClusterSpec, fit_to_cluster
from ..jsonable import jsonable
from ..policies.base import Policy
from ..space import Config
from ..trace.table import Trace
from . import parse_model_spec
from .base import MAX_HORIZON, WorkloadError

HOUR, DAY = 3600.0, 86400.0
MAX_ORIGINS = 1000


@dataclass(frozen=True)
class EvalSetup:
    history: float = 21 * DAY  # s of history each model is fitted on
    horizon: float = 7 * DAY  # s predicted
    step: float = 7 * DAY  # s between origins
    samples: int = 3  # samples per model and origin
    panel: int = 30  # configs drawn from the policy's space, besides its default
    seed: int = 0  # seeds the panel and the samples
    objective: str = "avg_jct"  # a Metrics field, less is better
    first: float | None = None  # first origin (default: trace start + history)
    last: float | None = None  # last origin (default: the last one with a full horizon)

    def check(self) -> None:
        for name in ("history", "horizon", "step"):
            if not getattr(self, name) > 0:
                raise WorkloadError(f"{name} must be > 0 seconds (got {getattr(self, name):g})")
        if self.horizon > MAX_HORIZON:
            raise WorkloadError(f"horizon of {self.horizon / 86400:,.6g} days is beyond the "
                                f"{MAX_HORIZON / 86400:g}-day limit of one sample")
        if self.samples < 1:
            raise WorkloadError(f"samples must be >= 1 (got {self.samples})")
        if self.panel < 1:
            raise WorkloadError(f"panel must be >= 1 (got {self.panel})")


@dataclass(frozen=True)
class Distances:
    ks_interarrival: float
    w_interarrival: float  # s
    ks_log_duration: float
    w_log_duration: float  # natural log of s
    ks_gpus: float
    w_gpus: float  # GPUs
    ks_gpu_hours_tod: float
    w_gpu_hours_tod: float  # hours of the day
    tv_vc: float  # total variation distance of VC shares (nan without VCs)
    load_ratio: float  # generated / real GPU-hours


@dataclass
class SampleResult:
    seed: int
    jobs: int
    distances: Distances
    objective: np.ndarray  # per panel config, on the generated workload
    spearman: float
    regret: float
    chosen: int  # panel index of the config best on the generated workload
    arrivals: np.ndarray  # jobs submitted per hour over the horizon
    demand: np.ndarray  # GPUs demanded (jobs started at once) at each hour


@dataclass
class OriginReal:
    origin: float
    jobs: int
    load: float  # offered GPU-hours / (cluster GPUs x horizon)
    objective: np.ndarray  # per panel config, on the real workload
    default_regret: float  # regret of not tuning (the policy's default config)
    random_regret: float  # expected regret of a config drawn at random from the panel
    arrivals: np.ndarray
    demand: np.ndarray


@dataclass
class OriginResult:
    origin: float
    model: str
    fit_seconds: float
    samples: list[SampleResult]

    def mean(self, attr: str) -> float:
        return _nanmean([_get(s, attr) for s in self.samples])

    def spread(self, attr: str) -> tuple[float, float]:
        vals = [v for v in (_get(s, attr) for s in self.samples) if not math.isnan(v)]
        return (min(vals), max(vals)) if vals else (math.nan, math.nan)


@dataclass
class ModelEvaluation:
    """The rolling-origin evaluation of workload models: per model, each origin's results."""

    setup: EvalSetup
    policy: str
    cluster: str
    configs: list[Config]
    reals: list[OriginReal]
    results: dict[str, list[OriginResult]] = field(default_factory=dict)
    gpus: int = 0  # of the cluster

    def summary(self) -> dict[str, dict]:
        """One entry per model: means over origins (of per-origin sample means) and per-origin lists."""
        out = {}
        base = self.results.get("replay")
        for name, per in self.results.items():
            entry: dict = {}
            for key in ("spearman", "regret", *(f.name for f in fields(Distances))):
                vals = [r.mean(key) for r in per]
                entry[f"{key}_mean"] = _nanmean(vals)
                entry[f"{key}_std"] = _nanstd([_get(s, key) for r in per for s in r.samples])
            entry["fit_seconds_mean"] = _nanmean([r.fit_seconds for r in per])
            entry["samples"] = len(per[0].samples) if per else 0
            entry["per_origin"] = {
                "origin": [r.origin for r in per],
                "spearman": [r.mean("spearman") for r in per],
                "spearman_min": [r.spread("spearman")[0] for r in per],
                "spearman_max": [r.spread("spearman")[1] for r in per],
                "regret": [r.mean("regret") for r in per],
                "regret_min": [r.spread("regret")[0] for r in per],
                "regret_max": [r.spread("regret")[1] for r in per],
                "ks_interarrival": [r.mean("ks_interarrival") for r in per],
                "load_ratio": [r.mean("load_ratio") for r in per],
                "default_regret": [o.default_regret for o in self.reals],
                "random_regret": [o.random_regret for o in self.reals],
            }
            if base is not None and name != "replay":
                entry["vs_replay"] = _versus(per, base)
            out[name] = entry
        return out


def origins(trace: Trace, setup: EvalSetup) -> np.ndarray:
    """Origins ``first, first + step, ...`` that have a full history and a full horizon in `trace`."""
    first = setup.first if setup.first is not None else trace.start + setup.history
    last = setup.last if setup.last is not None else trace.end - setup.horizon
    last = min(last, trace.end - setup.horizon + 1e-6)
    if first > last:
        return np.zeros(0)
    count = math.floor((last - first) / setup.step + 1e-9) + 1
    if count > MAX_ORIGINS:  # each origin fits every model and simulates the whole panel
        raise WorkloadError(f"a step of {setup.step:g} s gives {count:,} origins in the trace, more than the limit of "
                            f"{MAX_ORIGINS:,}; use a longer step, or fewer origins between the first and the last")
    return first + setup.step * np.arange(count)


def panel_configs(policy: type[Policy], n: int, seed: int) -> list[Config]:
    """The policy's default and `n` configs drawn from its space (fixed by `seed`)."""
    rng = random.Random(seed)
    return [policy.space.default()] + [policy.space.sample(rng) for _ in range(n)]


def evaluate(trace: Trace, cluster: ClusterSpec, policy: type[Policy], models: Sequence[str],
             setup: EvalSetup = EvalSetup(),
             progress: Callable[[int, int], None] | None = None) -> ModelEvaluation:
    """Score each model spec (``name`` or ``name:param=value``) at each origin of `trace`."""
    from ..sim import Metrics

    setup.check()
    if setup.objective not in Metrics.names():
        raise WorkloadError(f"unknown objective {setup.objective!r}; known: {', '.join(Metrics.names())}")
    for spec in models:
        parse_model_spec(spec)  # fail on a bad spec before any work
    when = origins(trace, setup)
    if len(when) == 0:
        raise WorkloadError(
            f"{trace.source or 'trace'}: no origin has {setup.history / DAY:g} days of history and "
            f"{setup.horizon / DAY:g} days after it (the trace spans {(trace.end - trace.start) / DAY:.1f} days)")
    configs = panel_configs(policy, setup.panel, setup.seed)
    runs = {spec: (1 if parse_model_spec(spec).deterministic else setup.samples) for spec in models}
    total = len(when) * len(configs) * (1 + sum(runs.values()))
    done = 0
    tick = progress or (lambda d, t: None)
    ev = ModelEvaluation(setup, policy.name, cluster.describe(), configs, [], gpus=cluster.gpus)

    def run_panel(workload: Trace) -> np.ndarray:
        nonlocal done
        vals = np.empty(len(configs))
        for i, cfg in enumerate(configs):
            vals[i] = _objective(workload, cluster, policy(cfg), setup.objective)
            done += 1
            tick(done, total)
        return vals

    for k, o in enumerate(when):
        real, _ = fit_to_cluster(trace.window(o, o + setup.horizon), cluster)
        real_obj = run_panel(real)
        ev.reals.append(OriginReal(
            float(o), len(real), real.gpu_seconds() / (cluster.gpus * setup.horizon), real_obj,
            _regret(real_obj, 0), float(np.mean(real_obj) / np.min(real_obj) - 1) if np.min(real_obj) > 0 else 0.0,
            _arrivals(real, o, setup.horizon), _demand(real, o, setup.horizon)))
        history = trace.window(o - setup.history, o)
        for spec in models:
            t0 = time.perf_counter()
            # the window the history was cut from (not before the trace's first job)
            model = parse_model_spec(spec).fit(history, max(o - setup.history, trace.start), o)
            fit_s = time.perf_counter() - t0
            samples = []
            for s in range(runs[spec]):
                seed = setup.seed * 100_003 + k * 1009 + s
                gen, _ = fit_to_cluster(model.sample(o, setup.horizon, seed), cluster)
                obj = run_panel(gen)
                chosen = int(np.argmin(obj))
                samples.append(SampleResult(
                    seed, len(gen), distances(real, gen), obj, _spearman(obj, real_obj),
                    _regret(real_obj, chosen), chosen, _arrivals(gen, o, setup.horizon), _demand(gen, o, setup.horizon)))
            ev.results.setdefault(spec, []).append(OriginResult(float(o), spec, fit_s, samples))
    return ev


# ------------------------------------------------------------------------------ measures


def distances(real: Trace, gen: Trace) -> Distances:
    """KS / Wasserstein distances between a real and a generated workload of the same period."""
    from scipy.stats import ks_2samp, wasserstein_distance

    def pair(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
        if len(a) == 0 or len(b) == 0:
            return math.nan, math.nan
        return float(ks_2samp(a, b).statistic), float(wasserstein_distance(a, b))

    ks_ia, w_ia = pair(np.diff(real.submit_time), np.diff(gen.submit_time))
    ks_d, w_d = pair(np.log(real.duration), np.log(gen.duration))
    ks_g, w_g = pair(real.num_gpus.astype(float), gen.num_gpus.astype(float))
    hr, hg = _tod_gpu_hours(real), _tod_gpu_hours(gen)
    if hr.sum() > 0 and hg.sum() > 0:
        cdf_gap = np.abs(np.cumsum(hr) / hr.sum() - np.cumsum(hg) / hg.sum())
        ks_tod = float(cdf_gap.max())
        w_tod = float(wasserstein_distance(np.arange(24), np.arange(24), hr, hg))
    else:
        ks_tod = w_tod = math.nan
    load = gen.gpu_seconds() / real.gpu_seconds() if real.gpu_seconds() > 0 else math.nan
    return Distances(ks_ia, w_ia, ks_d, w_d, ks_g, w_g, ks_tod, w_tod, _tv_vc(real, gen), load)


def _tod_gpu_hours(tr: Trace) -> np.ndarray:
    hour = np.floor((tr.submit_time % DAY) / HOUR).astype(np.int64)
    return np.bincount(hour, weights=tr.num_gpus * tr.duration / HOUR, minlength=24)


def _tv_vc(real: Trace, gen: Trace) -> float:
    if real.vc is None or gen.vc is None or len(real) == 0 or len(gen) == 0:
        return math.nan
    names = sorted(set(real.vc.tolist()) | set(gen.vc.tolist()))
    p = np.array([np.sum(real.vc == v) for v in names], dtype=float) / len(real)
    q = np.array([np.sum(gen.vc == v) for v in names], dtype=float) / len(gen)
    return float(0.5 * np.abs(p - q).sum())


def _arrivals(tr: Trace, start: float, horizon: float) -> np.ndarray:
    bins = int(math.ceil(horizon / HOUR))
    idx = np.floor((tr.submit_time - start) / HOUR).astype(np.int64)
    return np.bincount(idx[(idx >= 0) & (idx < bins)], minlength=bins).astype(float)


def _demand(tr: Trace, start: float, horizon: float) -> np.ndarray:
    """GPUs that the period's jobs would hold at each hour if each started when submitted."""
    grid = start + HOUR * np.arange(int(math.ceil(horizon / HOUR)))
    s, e = tr.submit_time, tr.submit_time + tr.duration
    g = tr.num_gpus.astype(float)
    cs = np.concatenate([[0.0], np.cumsum(g)])  # jobs are sorted by submit time
    oe = np.argsort(e)
    ce = np.concatenate([[0.0], np.cumsum(g[oe])])
    return cs[np.searchsorted(s, grid, side="right")] - ce[np.searchsorted(e[oe], grid, side="right")]


def _objective(workload: Trace, cluster: ClusterSpec, policy: Policy, objective: str) -> float:
    from ..sim import simulate

    if len(workload) == 0:
        return 0.0
    return float(getattr(simulate(workload, cluster, policy).metrics, objective))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho; nan when either side is constant (no ranking to compare)."""
    from scipy.stats import spearmanr

    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(spearmanr(a, b).statistic)


def _regret(real_obj: np.ndarray, chosen: int) -> float:
    best = float(np.min(real_obj))
    return float(real_obj[chosen] / best - 1.0) if best > 0 else 0.0


def _versus(per: list[OriginResult], base: list[OriginResult]) -> dict[str, int]:
    """Origins where the model beats replay: higher mean Spearman, lower mean regret."""
    out = {"origins": len(per), "spearman_better": 0, "regret_better": 0, "regret_tied": 0, "both_better": 0}
    for r, b in zip(per, base):
        sp = r.mean("spearman") > b.mean("spearman")
        rg = r.mean("regret") < b.mean("regret") - 1e-12
        out["spearman_better"] += sp
        out["regret_better"] += rg
        out["regret_tied"] += abs(r.mean("regret") - b.mean("regret")) <= 1e-12
        out["both_better"] += sp and rg
    return out


def _get(s: SampleResult, attr: str) -> float:
    return getattr(s.distances, attr) if hasattr(s.distances, attr) else getattr(s, attr)


def _nanmean(vals: Sequence[float]) -> float:
    v = np.asarray(vals, dtype=float)
    return float(np.nanmean(v)) if np.isfinite(v).any() else math.nan


def _nanstd(vals: Sequence[float]) -> float:
    v = np.asarray(vals, dtype=float)
    return float(np.nanstd(v)) if np.isfinite(v).any() else math.nan


def evaluation_data(ev: ModelEvaluation) -> dict:
    """Everything in an evaluation as plain JSON-able data (for report.json)."""
    return jsonable({"setup": asdict(ev.setup), "policy": ev.policy, "cluster": ev.cluster, "gpus": ev.gpus, "configs": ev.configs,
            "reals": [asdict(o) for o in ev.reals],
            "results": {m: [asdict(r) for r in per] for m, per in ev.results.items()},
            "summary": ev.summary()})
