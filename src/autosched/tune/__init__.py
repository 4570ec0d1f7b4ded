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
    "fragmentation": ".evaluate", "simulate_with_extras": ".evaluate", "TrialCheck": ".evaluate",
    "Executor": ".executor", "InProcessExecutor": ".executor", "TrialRun": ".executor",
    "ProcessExecutor": ".executor", "RayExecutor": ".executor", "make_executor": ".executor",
    "Edge": ".screening", "Screening": ".screening", "screen": ".screening",
    "SearchSpace": ".searchspace", "distribution": ".searchspace",
    "StudyError": ".study", "problem_identity": ".study", "trace_digest": ".study",
    "Trial": ".tuner", "TrialState": ".tuner", "Tuner": ".tuner", "TuneResult": ".tuner",
}

if TYPE_CHECKING:  # `X as X`: a re-export mypy sees (it cannot read `*_LAZY` in __all__)
    from .evaluate import INTERMEDIATES as INTERMEDIATES
    from .evaluate import ConfigScore as ConfigScore
    from .evaluate import Evaluator as Evaluator
    from .evaluate import TrialCheck as TrialCheck
    from .evaluate import fragmentation as fragmentation
    from .evaluate import simulate_with_extras as simulate_with_extras
    from .executor import Executor as Executor
    from .executor import InProcessExecutor as InProcessExecutor
    from .executor import ProcessExecutor as ProcessExecutor
    from .executor import RayExecutor as RayExecutor
    from .executor import TrialRun as TrialRun
    from .executor import make_executor as make_executor
    from .screening import Edge as Edge
    from .screening import Screening as Screening
    from .screening import screen as screen
    from .searchspace import SearchSpace as SearchSpace
    from .searchspace import distribution as distribution
    from .study import StudyError as StudyError
    from .study import problem_identity as problem_identity
    from .study import trace_digest as trace_digest
    from .tuner import Trial as Trial
    from .tuner import TrialState as TrialState
    from .tuner import Tuner as Tuner
    from .tuner import TuneResult as TuneResult

def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


__all__ = ["SearchConfig", "ExecutionConfig", "EXECUTORS", "SAMPLERS", "STUDY_NAME", "TuneError",
           "Objective", "Constraint", "ObjectiveError", *_LAZY]
