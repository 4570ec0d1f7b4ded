"""Search: objectives, causal knob screening, Bayesian optimisation, executors (local, Ray)."""

from __future__ import annotations

from .evaluate import INTERMEDIATES, Evaluation, Evaluator, fragmentation, simulate_with_extras
from .executor import Executor, InProcessExecutor, Outcome, ProcessExecutor, RayExecutor, make_executor
from .objective import Constraint, Objective, ObjectiveError
from .screening import Edge, Screening, screen
from .searchspace import SearchSpace, distribution
from .tuner import SAMPLERS, Trial, TuneError, Tuner, TuneResult

__all__ = ["Objective", "Constraint", "ObjectiveError", "Tuner", "TuneResult", "Trial", "TuneError",
           "SAMPLERS", "Screening", "Edge", "screen", "SearchSpace", "distribution", "Evaluator",
           "Evaluation", "INTERMEDIATES", "fragmentation", "simulate_with_extras", "Executor",
           "InProcessExecutor", "ProcessExecutor", "RayExecutor", "Outcome", "make_executor"]
