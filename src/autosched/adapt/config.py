"""The adaptive loop's settings: one frozen record (`LoopConfig`), checked once, here.

`autosched run`'s `Settings` (adapt/experiment.py) and the live agent's `AgentSettings`
(live/settings.py) are `LoopConfig` plus their own fields, and `Controller` takes it. A setting of
the loop is one declared field here (`adapt/setting.py`: default, help, flag, range); the
command line's option group both `run` and `agent init` use (`autosched.cli.common.loop_flags`)
and the docs' settings tables are made from it.

Also here: the seeds of a run's rounds (`round_seed_of`), which the settings' sample counts must
keep apart (`check_sample_counts`).
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..associations import Association
from ..cluster import ClusterSpec
from ..policies import get_policy
from ..space import Knob
from ..tune import Objective, SearchConfig
from ..workload import get_model
from ..workload.base import MAX_HORIZON
from .constraints import (
    ACCOUNT_TOLERANCE,
    FAIRSHARE_FLOOR,
    QUEUE_K,
    QUEUE_TOLERANCE,
    SIZE_TOLERANCE,
    PolicyConstraints,
)
from .errors import AdaptError
from .guardrail import Guardrail
from .observe import BACKLOG_HISTORY
from .setting import check_settings, declared, setting
from .sources import ModelSource, check_model_source

DAY = 86400.0
MAX_SEED = 2**32 - 1  # the samplers' seeding (NumPy's legacy RandomState) takes no more
# A round samples one period, and a workload model one sample of at most MAX_HORIZON; the history
# is held to the same bound (a longer window only costs memory: `workload fit --until 3000000d`
# grew to 24 GB).
MAX_SPAN = MAX_HORIZON


@declared
@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    """How the adaptive loop decides: what it tunes, how often, on what, and when it deploys.

    Each setting is declared once, with its default, help, flag and range (`setting`); the
    options of ``run`` and ``agent init`` and the docs' settings tables are made from these
    declarations. Every field is checked when the record is made (types too: a value read from a
    JSON file is checked as one given in Python), so a bad setting fails before any work starts,
    with a message naming the setting. The defaults are `autosched run`'s; the live agent's
    differ on purpose where `AgentSettings` says why.
    """

    KNOBS: ClassVar[dict[str, Knob]]  # each numeric or boolean setting's knob (`declared`)

    policy: str = setting("tiresias", "policy whose knobs are tuned (see `autosched policies`); the agent "
                          "tunes those that map to Slurm settings", "--policy", "-p")
    period: float = setting(7 * DAY, "time between rounds: re-tune at every period boundary (e.g. 7d, 1d, "
                            "12h, 600; the agent: at least 1 minute)", "--period", duration=True, unit="s")
    history: float = setting(7 * DAY, "window of past jobs each round learns from (the workload model is "
                             "fitted on it)", "--history", duration=True, unit="s")
    budget: int = setting(16, "tuning trials per round (one simulation per sampled workload each)",
                          "--budget", "-n", low=1)
    samples: int = setting(4, "workloads sampled from the model per round to tune on", "--samples", "-k", low=1)
    # 8, with k = 1: with 4 and k = 2 the guardrail kept the default through real gains of 28-38%
    # (ITP cluster07) and 15% (Philly 72x8); 8 and k = 1 deployed them and lost nothing elsewhere
    # (docs/history.md, "the guardrail on 8 fresh samples").
    validation_samples: int = setting(8, "fresh model samples (not the tuner's) the guardrail judges each "
                                      "round's winner on", "--validation-samples")
    level_sd: float = setting(0.0, "the samples are scenarios of a busier or quieter period: log sd of their "
                              "load level (0: all at the forecast level)", "--level-sd", low=0)
    persistence: float = setting(0.0, "the samples' load follows the last 6 hours': their arrival rate over the "
                                 "history's, to this power (0: the history's level; 0.4: as persistent as "
                                 "arrivals were on the traces; 1: as busy as the last hours)", "--persistence",
                                 low=0, high=1)
    model: str = setting("stat", "workload model for the coming period: stat, hybrid, replay or neural "
                         "(needs autosched[neural])", "--model")
    with_replay: bool = setting(False, "tune on the last period replayed as well as on the model's samples "
                                "(validation stays on fresh model samples)", "--with-replay/--model-only")
    metric: str = setting("avg_jct", "Metrics field the tuner and the guardrail optimise", "--objective",
                          hidden=("--metric",))
    seed: int = setting(0, "random seed (tuner and workload samples)", "--seed", low=0, high=MAX_SEED)
    drift: bool = setting(False, "also re-tune between boundaries when a drift test fires (run: daily; agent "
                          "run: every --poll; each firing costs a tuning round)", "--drift/--no-drift")
    # A round when contention arrives: between rounds, a check of the queue against what the
    # last round saw (`trigger.ContentionTrigger`).
    trigger: bool = setting(True, "a round when contention arrives: between rounds (run: daily; agent run: every "
                            "--poll) the queue is compared with what the last round saw, and a round runs when "
                            "its waiting jobs doubled (at least 20) and hold 2 hours of the cluster's GPUs", "--trigger/--no-trigger")
    # The guardrail (`Guardrail`): deploy when the mean paired gain > guard_k x its standard error
    # and > guard_margin, and (if set) no workload loses more than guard_max_loss.
    guard_k: float = setting(Guardrail.k, "guardrail: deploy (the agent: propose) only if the predicted gain "
                             "exceeds this many standard errors of the paired gain across samples",
                             "--guard-k", hidden=("--noise-k",), low=0)
    guard_margin: float = setting(Guardrail.margin, "guardrail: ... and exceeds this fraction (0.01 = 1%)",
                                  "--guard-margin", hidden=("--margin",), low=0)
    guard_max_loss: float | None = setting(None, "guardrail: ... and loses no more than this fraction on any "
                                           "sample (0.02 = 2%)", "--guard-max-loss", hidden=("--max-loss",),
                                           low=0)
    carry_backlog: bool = setting(True, "the evaluation workloads start with the jobs the cluster carries "
                                  "over")
    backlog_history: bool = setting(BACKLOG_HISTORY, "evaluation workloads keep each carried-over (running or "
                                    "pending) job's past (service received, time waited) instead of "
                                    "restarting it as a new job (docs/traces.md)",
                                    "--backlog-history/--no-backlog-history")
    # Off: the running ones are queued again at the round, with their remaining work, and a new
    # order can hold them back as no real scheduler would (kept for the ablation).
    frame_running: bool = setting(True, "evaluation workloads keep the jobs running at a round running to their "
                                  "end, as Slurm does (only queued and new jobs follow the config under test); "
                                  "--requeue-running queues them again at the round",
                                  "--frame-running/--requeue-running")
    # Each round compares a portfolio (`portfolio.race`), paired on the guardrail's samples; their
    # count doubles from `validation_samples` up to `max_validation_samples` while the paired
    # standard error does not decide.
    portfolio: bool = setting(True, "each round compares a portfolio (the running config, the search's best, the "
                              "last winners, the policy's archetypes) on the guardrail's samples; "
                              "--no-portfolio: the search's best alone", "--portfolio/--no-portfolio")
    max_validation_samples: int | None = setting(None, "the portfolio's samples double from --validation-samples "
                                                 "up to this many while the paired standard error does not "
                                                 "decide (default: twice --validation-samples)",
                                                 "--max-validation-samples", low=1)
    # The operator's policy (`constraints.PolicyConstraints`), relative to the running config.
    account_tolerance: float | None = setting(ACCOUNT_TOLERANCE, "the operator's policy: no account may wait "
                                              "longer on average than under the running config by more than "
                                              "this fraction (more for an account above its share), plus 10 "
                                              "minutes", "--account-tolerance", low=0)
    size_tolerance: float | None = setting(SIZE_TOLERANCE, "the operator's policy: no GPU-size class's p95 wait "
                                           "may grow by more than this fraction of the running config's, plus "
                                           "10 minutes", "--size-tolerance", low=0)
    queue_tolerance: float | None = setting(QUEUE_TOLERANCE, "the operator's policy: the jobs queued at a round "
                                            "may wait longer, in all, by at most this fraction of what they wait "
                                            "under the running config, plus 10 minutes each", "--queue-tolerance",
                                            low=0)
    # The queued jobs pay in the futures where a burst comes: the mean over the samples hides them.
    queue_k: float = setting(QUEUE_K, "the operator's policy: the queued jobs' added wait is their mean over the "
                             "samples plus this many standard errors (0: the mean alone)", "--queue-k", low=0)
    fairshare_floor: float | None = setting(None, "the operator's policy: PriorityWeightFairshare at least this "
                                            "fraction of the largest priority weight (default: 0.5 where the "
                                            "cluster has an association tree; 0: none)", "--fairshare-floor",
                                            low=0)
    pins: tuple[str, ...] = setting((), "the operator's policy: a knob held at its running value, by every "
                                    "search and proposal (repeatable)", "--pin")
    # The search keeps the operator's policy in view (`constraints.PolicySearch`): its trials are
    # checked on the tuning samples against the running config, from the simulations it runs,
    # TPE is steered toward configs that keep the policy, and the best of those joins the
    # portfolio (only with the portfolio: the race alone checks the policy).
    search_policy: bool = setting(True, "the round's search checks each trial against the operator's policy on "
                                  "its samples (from the simulations it runs anyway), steers toward configs "
                                  "that keep it, and offers the best that keeps it to the portfolio; "
                                  "--no-search-policy: the search ranks on the objective alone",
                                  "--search-policy/--no-search-policy")
    # A candidate that breaks the policy on the race's first samples with a gain past the margin
    # is screened again halfway and a quarter of the way from the running config
    # (`portfolio.milder_variants`). Off: on the bundled sample it took more of the gain but let
    # the real weeks break the policy more often, the samples being far busier than those weeks
    # (docs/history.md, "milder variants").
    milder: bool = setting(False, "a portfolio candidate that breaks the operator's policy with a gain is raced "
                           "again halfway and a quarter of the way from the running config (off by default: "
                           "see docs/history.md)", "--milder/--no-milder")
    # The policy also held against the config the loop started from (`portfolio.race`'s
    # reference): changes that each keep it against the one before cannot add up past it. Off:
    # in these replays it refused second changes worth having (the bundled sample under
    # tiresias, seed 0: -27.0% where it had -31.1%) (docs/history.md, "milder variants").
    cumulative_policy: bool = setting(False, "the operator's policy also holds against the config the loop "
                                      "started from (the agent's: the config it found live, or the newest hand "
                                      "edit it adopted), so that changes cannot add up past it (off by default: "
                                      "see docs/history.md)", "--cumulative-policy/--no-cumulative-policy")
    # Off: at 16 trials a round it searched no better than without it and cost more
    # (docs/tuning.md, "Screening on against off").
    screening: bool = setting(False, "causal knob screening inside each tuning round (off by default: see "
                              "docs/tuning.md)", "--screening/--no-screening")

    def __post_init__(self) -> None:
        if isinstance(self.pins, list):  # as JSON (the agent's settings file) gives it back
            object.__setattr__(self, "pins", tuple(self.pins))
        check_types(self)
        check_settings(self, AdaptError)
        if not (self.period > 0 and self.history > 0):
            raise AdaptError(f"period and history must be longer than 0 (got period {self.period:g} s, "
                             f"history {self.history:g} s)")
        for name in ("period", "history"):
            if getattr(self, name) > MAX_SPAN:
                raise AdaptError(f"{name} of {_days(getattr(self, name))} days is beyond the "
                                 f"{MAX_SPAN / DAY:g}-day limit of one workload sample")
        get_policy(self.policy)
        get_model(self.model)
        self.objective()
        # The source's, the guardrail's and the seed counts' own checks.
        check_model_source(self.samples, self.validation_samples, self.level_sd, persistence=self.persistence)
        check_sample_counts(self.samples, self.validation_samples)
        check_sample_counts(self.samples, self.most_validation_samples)
        if self.most_validation_samples < self.validation_samples:
            raise AdaptError(f"max validation samples {self.max_validation_samples} is below the validation "
                             f"samples {self.validation_samples}")
        self.guardrail()
        self.constraints(ClusterSpec.uniform_nodes(1, 1))
        unknown = sorted(set(map(str, self.pins)) - set(get_policy(self.policy).space.names))
        if unknown:
            raise AdaptError(f"pin: unknown knob(s) {', '.join(map(str, unknown))} of {self.policy}")

    # -- what the loop is made of ---------------------------------------------------------------
    def objective(self) -> Objective:
        return Objective(metric=self.metric)

    @property
    def most_validation_samples(self) -> int:
        """The portfolio's sample budget: `max_validation_samples`, or twice `validation_samples`."""
        return 2 * self.validation_samples if self.max_validation_samples is None else self.max_validation_samples

    def guardrail(self) -> Guardrail:
        return Guardrail(self.guard_k, self.guard_margin, self.guard_max_loss)

    def constraints(self, cluster: ClusterSpec) -> PolicyConstraints:
        """The operator's policy on `cluster`: its accounts' shares come from the cluster's
        association tree (equal without one), and so does the fair-share floor's default."""
        floor = self.fairshare_floor
        if floor is None:
            floor = FAIRSHARE_FLOOR if cluster.associations else None
        return PolicyConstraints(self.account_tolerance, self.size_tolerance, self.queue_tolerance,
                                 queue_k=self.queue_k, fairshare_floor=floor or None,
                                 pins=self.pins, weights=get_policy(self.policy).space.weights,
                                 shares=account_shares(cluster.associations))

    @property
    def search(self) -> SearchConfig:
        """Each round's search; the controller gives every round a seed of its own."""
        return SearchConfig(budget=self.budget, seed=self.seed, screening=self.screening)

    def model_source(self, factory: Any = None, time_scale: float = 1.0) -> ModelSource:
        """The loop's workloads: `model` fitted on the history, sampled (`factory`: a model class
        by name, for tests). `time_scale`: see `ModelSource`; the loop runs jobs in their own
        time, the live agent's settings may say otherwise (`AgentSettings.time_scale`)."""
        return ModelSource(self.model, self.samples, factory=factory, with_replay=self.with_replay,
                           validation_samples=self.validation_samples, level_sd=self.level_sd,
                           time_scale=time_scale, persistence=self.persistence)

    def loop_values(self) -> dict[str, Any]:
        """The `LoopConfig` fields of this record (of a subclass too), by name."""
        return {f.name: getattr(self, f.name) for f in fields(LoopConfig)}


def account_shares(tree: tuple[Association, ...]) -> dict[str, float]:
    """Each top-level account's shares (its association without a user, under root); empty
    without a tree. The constraints are per account, against its share among its siblings."""
    return {a.account: float(a.shares) for a in tree
            if not a.user and a.account != "root" and a.parent in ("", "root")}


def _days(seconds: float) -> str:
    days = seconds / DAY
    return f"{days:,.0f}" if days >= 1e5 else f"{days:,.6g}"


LOOP_FIELDS = tuple(f.name for f in fields(LoopConfig))


# ---------------------------------------------------------------------------------- types

def check_types(record: Any) -> None:
    """Check each field of dataclass `record` against its annotation: ``float`` takes an int or a
    float, finite; ``int`` an int (not a bool); ``bool``, ``str``, ``dict``, ``list`` and classes
    their own type; ``X | None`` also None. Raises `AdaptError` naming the field."""
    hints = _hints(type(record))
    for f in fields(record):
        value = getattr(record, f.name)
        problem = _type_problem(hints[f.name], value)
        if problem:
            raise AdaptError(f"{f.name.replace('_', ' ')} {value!r}: {problem}")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _type_problem(hint: Any, value: Any) -> str:
    """"" if `value` fits `hint`, else what it should be."""
    if hint is Any:
        return ""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if value is None and type(None) in args:
            return ""
        problems = [_type_problem(a, value) for a in args if a is not type(None)]
        return "" if "" in problems else problems[0]
    origin = typing.get_origin(hint) or hint
    if origin is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
        return "" if math.isfinite(value) else "must be finite"
    if origin is int:
        return "" if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    names = {bool: "true or false", str: "text", dict: "a mapping", list: "a list", tuple: "a list"}
    if isinstance(origin, type) and not isinstance(value, origin):
        return f"must be {names.get(origin, origin.__name__)}"
    return ""


# ---------------------------------------------------------------------------------- round seeds

# Validation samples of a round are drawn with seed round_seed + VALIDATION_SEED_OFFSET, and rounds
# are ROUND_SEED_STRIDE seeds apart: with at most 503 tuning and 506 validation samples a round, no
# validation seed is ever a tuning seed, of this round or another (`check_sample_counts`).
VALIDATION_SEED_OFFSET = 503
ROUND_SEED_STRIDE = 1_009


def round_seed_of(seed: int, index: int) -> int:
    """The seed of a run's `index`-th round (0: its first), from which the round's tuning and
    validation samples are drawn; a benchmark that redraws a round's samples calls this too."""
    return seed * 100_003 + index * ROUND_SEED_STRIDE


def check_sample_counts(samples: int, validation_samples: int) -> None:
    """Refuse sample counts whose seeds could overlap (see VALIDATION_SEED_OFFSET)."""
    most = ROUND_SEED_STRIDE - VALIDATION_SEED_OFFSET
    if samples > VALIDATION_SEED_OFFSET or validation_samples > most:
        raise AdaptError(f"at most {VALIDATION_SEED_OFFSET} samples and {most} validation samples a round, so that "
                         f"no validation seed is a tuning seed (got {samples} and {validation_samples})")
