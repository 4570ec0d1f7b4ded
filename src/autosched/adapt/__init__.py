"""The adaptive loop (`Controller`) and the replay experiment on a real trace (`run_experiment`)."""

from .config import LoopConfig
from .controller import Controller, Decision
from .drift import DriftReport, DriftTest, Profile, profile
from .errors import AdaptError
from .experiment import (
                         DESCRIPTIONS,
                         KNOWN_STRATEGIES,
                         ORACLES,
                         STRATEGIES,
                         ExperimentResult,
                         PeriodResult,
                         Settings,
                         StrategyResult,
                         run_experiment,
)
from .guardrail import Guardrail, Verdict
from .observe import Observation, observe
from .sources import FutureSource, ModelSource, ReplaySource, WorkloadSource

__all__ = ["AdaptError", "LoopConfig", "Controller", "Decision", "DriftTest", "DriftReport", "Profile", "profile", "Guardrail", "Verdict",
           "Observation", "observe", "ModelSource", "ReplaySource", "FutureSource", "WorkloadSource",
           "Settings", "run_experiment", "ExperimentResult", "StrategyResult", "PeriodResult",
           "STRATEGIES", "KNOWN_STRATEGIES", "ORACLES", "DESCRIPTIONS"]
