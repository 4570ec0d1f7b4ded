"""What a scheduling policy is, and the knob every policy has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from ..cluster import PLACEMENT_HELP, PLACEMENTS
from ..sim.contract import JobInfo, Partition
from ..space import Categorical, Config, ConfigSpace

PLACEMENT = Categorical("placement", PLACEMENT_HELP, choices=PLACEMENTS, default="consolidate")


class Policy:
    """Decides which waiting jobs start, and (if preemptive) which running jobs stop.

    The base of every policy: it implements the engine's hooks (`sim/contract.py`,
    ``PolicyHooks``, which says when each is called and what a policy may do in it). One bound
    instance serves one partition: the engine binds a ``clone()`` per partition. ``schedule``
    acts through ``part.start(j)`` and ``part.preempt(j)``.

    Subclasses declare ``name``, ``summary``, ``space`` (their knobs), ``oracle`` (True if they
    read true job durations, which no real scheduler knows) and ``preemptive``; they implement
    ``on_arrival`` and ``schedule``, and usually ``configure`` (derive parameters from the
    config) and ``bind`` (set up per-run state, then call ``super().bind``).
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    space: ClassVar[ConfigSpace]
    oracle: ClassVar[bool] = False
    preemptive: ClassVar[bool] = False
    # Which backfill the run used, for `autosched simulate` to report; None for a policy with no
    # backfill choice (only multifactor sets it: its backfill depends on the trace's time limits).
    backfill_kind: str | None = None

    # Set by `bind`, before the engine calls any hook: hooks may use them without a None check.
    part: Partition
    jobs: JobInfo

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """A policy with `config` (missing knobs take their defaults). Raises ConfigError if it
        is not valid for ``space``."""
        self.config: Config = self.space.validate(config or {})

    def clone(self) -> Self:
        """A new, unbound policy of the same class and config, without this one's run state:
        what the engine binds to each partition of a new run (so one instance may serve many
        runs). A subclass whose ``__init__`` takes more than the config overrides this."""
        return type(self)(self.config)

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        """Called once per run, before any other hook. A subclass sets up its per-run state and
        then calls ``super().bind``, which applies the placement and calls ``configure``."""
        self.part = part
        self.jobs = jobs
        part.placement = self.config["placement"]
        self.configure()

    def on_reconfigure(self, config: Mapping[str, Any], now: float) -> None:
        """Take a new config mid-run (queued and running jobs stay where they are): validate it,
        apply its placement and call ``configure``. A policy whose per-run state depends on the
        config overrides this to re-derive that state as of `now` after ``super()``."""
        self._take_config(config)
        self.configure()

    def _take_config(self, config: Mapping[str, Any]) -> None:
        """Validate `config` and make it this bound policy's (placement included)."""
        self.config = self.space.validate(config)
        self.part.placement = self.config["placement"]

    def configure(self) -> None:
        """Derive internal parameters from ``self.config``: called by ``bind`` and on every
        reconfiguration (so only from the config, not from the jobs)."""

    def on_arrival(self, j: int, now: float) -> None:
        """Job j was submitted and waits (see `PolicyHooks.on_arrival`)."""
        raise NotImplementedError

    def on_finish(self, j: int, now: float) -> None:
        """A running job finished (the engine has already released its GPUs)."""

    def schedule(self, now: float) -> None:
        """Start and stop jobs now (see `PolicyHooks.schedule`)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({knobs})"
