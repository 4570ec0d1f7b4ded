"""How the tuner searches and where its trials run: two small settings records, each checked once.

`SearchConfig` says what the search does (budget, seed, sampler, screening); the same search
gives the same trials whatever runs it. `ExecutionConfig` says where and how trials run (worker
processes or Ray, a per-trial timeout, the study file that makes a run resumable); it changes
speed and durability, not which configs are tried - with one exception documented in
docs/tuning.md: a trial cut off by its timeout fails, and that depends on the machine.

Both validate in ``__post_init__``: a bad value raises `TuneError` before any work starts, with a
message that names the setting, never a command-line flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..space import Subspace

SAMPLERS = ("tpe", "gp", "random")
EXECUTORS = ("local", "ray")
STUDY_NAME = "autosched"


class TuneError(InputError):
    """A tuning run that cannot start (bad settings, a study made for another problem)."""


@dataclass(frozen=True)
class SearchConfig:
    """What the search does.

    - ``budget``: trials in all (a resumed study counts the trials it already has);
    - ``seed``: seeds the sampler and the initial design (None: a fresh random seed);
    - ``sampler``: ``tpe`` (default), ``gp`` (needs torch) or ``random``;
    - ``screening``: causal knob screening on an initial design (needs causal-learn);
    - ``initial_design``: trials before screening (None: about three per knob, see
      `Tuner.initial_trials`);
    - ``patience``: after screening, this many completed trials in a row without a new best give
      the frozen knobs back to the search (None: never);
    - ``subspace``: the part of the policy's knob space to search (`autosched.space.Subspace`:
      knobs pinned, knobs within bounds, the start config; None: all of it), e.g. the knobs a live
      agent may write (`autosched.export.live.live_subspace`).
    """

    budget: int = 40
    seed: int | None = 0
    sampler: str = "tpe"
    screening: bool = True
    initial_design: int | None = None
    patience: int | None = 5
    subspace: Subspace | None = None

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise TuneError(f"budget must be at least 1 trial (got {self.budget})")
        if self.sampler not in SAMPLERS:
            raise TuneError(f"sampler {self.sampler!r}: use one of {', '.join(SAMPLERS)}")
        if self.initial_design is not None and self.initial_design < 1:
            raise TuneError(f"initial design must be at least 1 trial (got {self.initial_design})")
        if self.patience is not None and self.patience < 1:
            raise TuneError(f"patience must be at least 1 trial (got {self.patience})")


@dataclass(frozen=True)
class ExecutionConfig:
    """Where and how the trials run.

    - ``workers``: trials at a time (1: in this process; more: forked worker processes or Ray
      tasks). Results are told to the sampler in trial order, so a seed and a worker count give
      the same trials on every run;
    - ``executor``: ``local`` or ``ray``; ``address`` joins a running Ray cluster;
    - ``trial_timeout``: seconds after which a trial is stopped and recorded as failed;
    - ``study``: SQLite file that keeps the study (a killed run resumes from it); one run at a
      time uses it; ``study_name`` names the study inside the file.
    """

    workers: int = 1
    executor: str = "local"
    address: str | None = None
    trial_timeout: float | None = None
    study: Path | None = None
    study_name: str = STUDY_NAME

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise TuneError(f"workers must be at least 1 (got {self.workers})")
        if self.executor not in EXECUTORS:
            raise TuneError(f"executor {self.executor!r}: use one of {', '.join(EXECUTORS)}")
        if self.trial_timeout is not None and not self.trial_timeout > 0:
            raise TuneError(f"trial timeout must be positive (got {self.trial_timeout:g} s)")
        if self.study is not None and not isinstance(self.study, Path):
            object.__setattr__(self, "study", Path(self.study))
        if not self.study_name:
            raise TuneError("study name must not be empty")
