"""The adaptive loop's settings: one frozen record (`LoopConfig`), checked once, here.

`autosched run`'s `Settings` (adapt/experiment.py) and the live agent's `AgentSettings`
(live/settings.py) are `LoopConfig` plus their own fields, and `Controller` takes it. A setting of
the loop is a field here; the command line's flag for it is one line of the shared option group
(`autosched.cli.common.LOOP_FLAGS`), used by both `run` and `agent init`.

Also here: the seeds of a run's rounds (`round_seed_of`), which the settings' sample counts must
keep apart (`check_sample_counts`).
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass, fields
from typing import Any

from ..policies import get_policy
from ..tune import Objective, SearchConfig
from ..workload import get_model
from ..workload.base import MAX_HORIZON
from .errors import AdaptError
from .guardrail import Guardrail
from .observe import BACKLOG_HISTORY
from .sources import ModelSource, check_model_source

DAY = 86400.0
MAX_SEED = 2**32 - 1  # the samplers' seeding (NumPy's legacy RandomState) takes no more
# A round samples one period, and a workload model one sample of at most MAX_HORIZON; the history
# is held to the same bound (a longer window only costs memory: `workload fit --until 3000000d`
# grew to 24 GB).
MAX_SPAN = MAX_HORIZON


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    """How the adaptive loop decides: what it tunes, how often, on what, and when it deploys.

    Every field is checked when the record is made (types too: a value read from a JSON file is
    checked as one given in Python), so a bad setting fails before any work starts, with a message
    naming the setting. The defaults are `autosched run`'s; the live agent's differ on purpose
    where `AgentSettings` says why.
    """

    policy: str = "tiresias"  # the policy whose knobs are tuned
    period: float = 7 * DAY  # s between rounds: the loop re-tunes at every period boundary
    history: float = 7 * DAY  # s of past jobs each round learns from
    budget: int = 16  # tuning trials per round
    samples: int = 4  # workloads sampled per round to tune on
    # Fresh model samples the guardrail judges a winner on (see ModelSource). 8, with k = 1: with
    # 4 and k = 2 the guardrail kept the default through real gains of 28-38% (ITP cluster07) and
    # 15% (Philly 72x8); 8 and k = 1 deployed them and lost nothing elsewhere (docs/history.md,
    # "the guardrail on 8 fresh samples").
    validation_samples: int = 8
    # log sd of the load level across the samples of a round (0: every sample at the forecast level)
    level_sd: float = 0.0
    model: str = "stat"  # the workload model that samples the coming period
    # the workloads: the last period replayed plus `samples` model samples (ModelSource
    # with_replay), instead of the model samples alone
    with_replay: bool = False
    metric: str = "avg_jct"  # the Metrics field the tuner and the guardrail optimise
    seed: int = 0
    drift: bool = False  # also re-tune when a drift test fires between boundaries
    # The guardrail (`Guardrail`): deploy when the mean paired gain > guard_k x its standard error
    # and > guard_margin, and (if set) no workload loses more than guard_max_loss.
    guard_k: float = Guardrail.k
    guard_margin: float = Guardrail.min_margin
    guard_max_loss: float | None = None
    carry_backlog: bool = True  # the evaluation workloads start with the jobs the cluster carries over
    # The backlog keeps each job's past (attained service, age; `observe.BACKLOG_HISTORY`).
    backlog_history: bool = BACKLOG_HISTORY
    # Causal knob screening in each round's search. Off: at 16 trials a round it searched no
    # better than without it and cost more (docs/tuning.md, "Screening on against off").
    screening: bool = False

    def __post_init__(self) -> None:
        check_types(self)
        if not (self.period > 0 and self.history > 0):
            raise AdaptError(f"period and history must be longer than 0 (got period {self.period:g} s, "
                             f"history {self.history:g} s)")
        for name in ("period", "history"):
            if getattr(self, name) > MAX_SPAN:
                raise AdaptError(f"{name} of {_days(getattr(self, name))} days is beyond the "
                                 f"{MAX_SPAN / DAY:g}-day limit of one workload sample")
        if self.budget < 1:
            raise AdaptError(f"budget must be at least 1 (got {self.budget})")
        if not 0 <= self.seed <= MAX_SEED:
            raise AdaptError(f"seed must be in [0, {MAX_SEED}] (got {self.seed})")
        get_policy(self.policy)
        get_model(self.model)
        self.objective()
        # The source's, the guardrail's and the seed counts' own checks.
        check_model_source(self.samples, self.validation_samples, self.level_sd)
        check_sample_counts(self.samples, self.validation_samples)
        self.guardrail()

    # -- what the loop is made of ---------------------------------------------------------------
    def objective(self) -> Objective:
        return Objective(metric=self.metric)

    def guardrail(self) -> Guardrail:
        return Guardrail(self.guard_k, self.guard_margin, self.guard_max_loss)

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
                           time_scale=time_scale)

    def loop_values(self) -> dict[str, Any]:
        """The `LoopConfig` fields of this record (of a subclass too), by name."""
        return {f.name: getattr(self, f.name) for f in fields(LoopConfig)}


def _days(seconds: float) -> str:
    days = seconds / DAY
    return f"{days:,.0f}" if days >= 1e5 else f"{days:,.6g}"


def loop_defaults(cls: type[LoopConfig]) -> dict[str, Any]:
    """The defaults `cls` (LoopConfig or a subclass that redeclares some) gives the loop's fields."""
    return {f.name: f.default for f in fields(cls) if f.name in LOOP_FIELDS}


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
