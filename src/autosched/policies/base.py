"""What a scheduling policy is, and the knob every policy has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..cluster import PLACEMENT_HELP, PLACEMENTS
from ..sim.engine import JobInfo, Partition
from ..space import Categorical, Config, ConfigSpace

PLACEMENT = Categorical("placement", PLACEMENT_HELP, choices=PLACEMENTS, default="consolidate")


class Policy:
    """Decides which waiting jobs start, and (if preemptive) which running jobs stop.

    One instance serves one partition. The engine calls ``on_arrival`` and ``on_finish`` as jobs
    come and go, then ``schedule(now)`` once per instant at which anything in the partition
    changed (or at a time the policy asked for with ``part.wake_at``). ``schedule`` acts through
    ``part.start(j)`` and ``part.preempt(j)``.

    Subclasses declare ``name``, ``space`` (their knobs) and ``oracle`` (True if they read true
    job durations, which no real scheduler knows).
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    space: ClassVar[ConfigSpace]
    oracle: ClassVar[bool] = False
    preemptive: ClassVar[bool] = False

    # Set by `bind`, before the engine calls any hook: hooks may use them without a None check.
    part: Partition
    jobs: JobInfo

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config: Config = self.space.validate(config or {})
        self._bound = False

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        self.part = part
        self.jobs = jobs
        self._bound = True
        part.placement = self.config["placement"]
        self.configure()

    def reconfigure(self, config: Mapping[str, Any]) -> None:
        """Take a new config mid-run: queued and running jobs stay where they are."""
        self.config = self.space.validate(config)
        if self._bound:
            self.part.placement = self.config["placement"]
            self.configure()

    def configure(self) -> None:
        """Derive internal parameters from ``self.config`` (called on bind and reconfigure)."""

    def on_arrival(self, j: int, now: float) -> None:
        raise NotImplementedError

    def on_finish(self, j: int, now: float) -> None:
        """A running job finished (the engine has already released its GPUs)."""

    def schedule(self, now: float) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({knobs})"
