"""Search: objectives, causal knob screening, Bayesian optimisation, executors (local, Ray).

The settings records (`SearchConfig`, `ExecutionConfig`) and `Objective` import at once; the rest
(Optuna, SciPy, the executors) is imported on first use, so a layer above that only names the
settings (the adaptive loop, the live agent's status) does not pay Optuna's import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import EXECUTORS, SAMPLERS, STUDY_NAME, ExecutionConfig, SearchConfig, TuneError
from .objective import Constraint, Objective, ObjectiveError

_LAZY = {
    "INTERMEDIATES": ".evaluate", "ConfigScore": ".evaluate", "Evaluator": ".evaluate",
    "fragmentation": ".evaluate", "simulate_with_extras": ".evaluate",
    "Executor": ".executor", "InProcessExecutor": ".executor", "TrialRun": ".executor",
    "ProcessExecutor": ".executor", "RayExecutor": ".executor", "make_executor": ".executor",
    "Edge": ".screening", "Screening": ".screening", "screen": ".screening",
    "SearchSpace": ".searchspace", "distribution": ".searchspace",
    "StudyError": ".study", "problem_identity": ".study", "trace_digest": ".study",
    "Trial": ".tuner", "Tuner": ".tuner", "TuneResult": ".tuner",
}

if TYPE_CHECKING:
    from .evaluate import INTERMEDIATES, ConfigScore, Evaluator, fragmentation, simulate_with_extras
    from .executor import Executor, InProcessExecutor, ProcessExecutor, RayExecutor, TrialRun, make_executor
    from .screening import Edge, Screening, screen
    from .searchspace import SearchSpace, distribution
    from .study import StudyError, problem_identity, trace_digest
    from .tuner import Trial, Tuner, TuneResult


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


__all__ = ["SearchConfig", "ExecutionConfig", "EXECUTORS", "SAMPLERS", "STUDY_NAME", "TuneError",
           "Objective", "Constraint", "ObjectiveError", *_LAZY]
