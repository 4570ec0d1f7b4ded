"""The engine <-> policy contract: what a policy sees of the simulator, and the hooks the engine calls.

The engine (`sim/engine.py`) implements `Partition`; a policy implements `PolicyHooks`, in
practice by subclassing `autosched.policies.Policy`. Both import their types from here and
neither imports the other.

One run, as the engine drives it:

1. ``policy.clone()`` once per partition: each partition gets its own unbound policy with the
   caller's config (the caller's instance is never bound, so it may be reused for another run).
2. ``bind(part, jobs)`` once, before any other hook.
3. Then, at each instant t at which something happens, in this order:
   ``on_arrival(j, t)`` for each job submitted at t (in trace order), ``on_finish(j, t)`` for
   each job that completed at t, then ``schedule(t)`` once for every partition that any of these
   touched or that asked for a wake-up at t (in partition order).
4. ``on_reconfigure(config, now)`` when the caller reconfigures the run between two
   ``Simulator.run(until=...)`` calls; every partition then gets ``schedule(now)``.

Only ``schedule`` changes what runs: ``on_arrival``, ``on_finish`` and ``on_reconfigure`` update
the policy's own bookkeeping, and ``start`` or ``preempt`` called from them (or from ``bind``)
raises SimulationError. What a policy is handed is read-only: `JobInfo`'s columns are tuples and
``Partition.running`` is a read-only view, so a policy cannot change the engine's record of a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

from ..cluster import ClusterSpec
from .placement import Alloc, NodeView


@dataclass(frozen=True)
class JobInfo:
    """What a scheduler knows about the jobs of a run: tuples indexed by the job's row in the
    (submit-sorted) trace, shared by every partition (tuples, so that no policy can change what
    the engine and the other partitions read). ``duration`` is set only for oracle policies
    (``PolicyHooks.oracle``); a real scheduler does not know it."""

    submit: tuple[float, ...]
    gpus: tuple[int, ...]
    vc: tuple[int, ...] | None  # integer codes of the trace's labels (sorted), when it has them
    user: tuple[int, ...] | None
    duration: tuple[float, ...] | None
    # Each job's time limit (s; inf = none) when the trace has them: a real scheduler knows it.
    time_limit: tuple[float, ...] | None = None
    cpus: tuple[int, ...] | None = None  # CPUs requested (0 = not known)
    account: tuple[int, ...] | None = None  # Slurm account codes
    partition: tuple[int, ...] | None = None  # Slurm partition codes
    # When each job was first submitted, for a trace with an ``age`` column (``submit - age``: a
    # job that existed before its row's submit time, e.g. a backlog job re-submitted at a
    # controller's decision time). None: each job's `submit`. What ages a job (Slurm's age
    # factor, a FIFO's order, a starvation guard's wait) counts from it.
    origin: tuple[float, ...] | None = None
    # The label each code of `vc`, `user` and `account` stands for (code i -> labels[col][i]):
    # e.g. to find a job's association in a configured Slurm association tree.
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def first_submit(self) -> tuple[float, ...]:
        """When each job was first submitted, what ages it: `origin` for a trace with ages, else
        `submit`."""
        return self.submit if self.origin is None else self.origin


class Partition(Protocol):
    """One scheduling domain (the whole cluster, or one VC) as its policy sees it: the whole
    interface between a policy and the engine.

    What a real scheduler knows: ``now``, ``free``, ``capacity``, ``running``, each job's
    ``attained``/``executed`` service, ``run_started``, ``waiting_since`` and ``served`` work.
    ``remaining`` reads true durations and raises unless the policy is an oracle.
    """

    placement: str  # how `start` places jobs (a `placement` knob value); set by `Policy.bind`

    @property
    def pool(self) -> NodeView:
        """The partition's nodes, read-only (`placement.NodeView`: free GPUs per node; a write
        raises SimulationError). Only `start`, `preempt` and the engine change them; a policy
        that plans ahead places jobs on ``pool.planning_copy()``."""
        ...

    @property
    def capacity(self) -> int:
        """GPUs in the partition."""
        ...

    @property
    def cluster(self) -> ClusterSpec:
        """The cluster the run is on, for its fixed properties (e.g. a Slurm controller's
        thread clocks and association tree)."""
        ...

    @property
    def now(self) -> float:
        """The simulated time (the ``now`` every hook is given)."""
        ...

    @property
    def free(self) -> int:
        """GPUs not held by any job now."""
        ...

    @property
    def running(self) -> Mapping[int, None]:
        """The partition's running jobs, in the order they started (a read-only view that the
        engine keeps up to date: do not keep it across hooks expecting it to stay the same)."""
        ...

    def start(self, j: int, exclude: int = 0) -> bool:
        """Start (or resume) waiting job j now; False when placement finds no room for it
        (outside the nodes in the bitmask `exclude`, when given). Raises SimulationError if j
        is not waiting, or if called from any hook but ``schedule``."""
        ...

    def preempt(self, j: int) -> None:
        """Stop running job j now; it keeps its progress and pays the restart overhead when
        resumed. Raises SimulationError if j is not running, or if called from any hook but
        ``schedule``."""
        ...

    def wake_at(self, t: float) -> None:
        """Ask for a ``schedule(t)`` call at time t.

        A partition keeps ONE pending request: a later call replaces the earlier one (even when
        the earlier one was sooner), so ask for the earliest time you need. A time not after
        ``now``, or infinite, is ignored (the pending request stands); NaN raises
        SimulationError. ``schedule`` is called at most once per instant, whether for a request,
        an arrival or a completion.
        """
        ...

    def cancel_wake(self) -> None:
        """Drop the pending ``wake_at`` request, if any: no ``schedule`` call comes for it
        (arrivals and completions still bring theirs)."""
        ...

    def attained(self, j: int, now: float) -> float:
        """GPU-seconds job j has held its GPUs so far (restart overhead included), with the
        service it received before its submission (the trace's ``attained`` column)."""
        ...

    def executed(self, j: int, now: float) -> float:
        """Seconds job j has held its GPUs so far (restart overhead included), with the time it
        ran before its submission (the trace's ``attained`` over its GPUs)."""
        ...

    def served(self, j: int, now: float) -> float:
        """Seconds of work job j has done so far (its observable progress, not its total)."""
        ...

    def allocation(self, j: int) -> Alloc:
        """(node, GPUs) pairs running job j holds (() under 'count' placement)."""
        ...

    def run_started(self, j: int) -> float:
        """When the current run of running job j began."""
        ...

    def waiting_since(self, j: int) -> float:
        """When waiting job j last began waiting (its submission, or its last preemption)."""
        ...

    def remaining(self, j: int, now: float) -> float:
        """Seconds of work left (oracle policies only: raises SimulationError otherwise)."""
        ...


class PolicyHooks(Protocol):
    """What the engine calls on a policy (see the module docstring for the order). One bound
    instance serves one partition of one run."""

    @property
    def oracle(self) -> bool:
        """True if the policy reads true job durations (``JobInfo.duration``,
        ``Partition.remaining``), which no real scheduler knows."""
        ...

    def clone(self) -> Self:
        """A new, unbound policy of the same kind and config, with none of this instance's run
        state: what each partition of a new run starts from."""
        ...

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        """Called once, before any other hook: set up the per-run state. No job has arrived."""
        ...

    def on_arrival(self, j: int, now: float) -> None:
        """Job j was submitted at `now` and waits; ``schedule(now)`` follows. Bookkeeping only
        (``start`` and ``preempt`` raise here)."""
        ...

    def on_finish(self, j: int, now: float) -> None:
        """Running job j completed at `now`; the engine has already released its GPUs and
        removed it from ``part.running``. ``schedule(now)`` follows. Bookkeeping only
        (``start`` and ``preempt`` raise here)."""
        ...

    def schedule(self, now: float) -> None:
        """Decide: start waiting jobs and (if preemptive) preempt running ones through the
        partition, and ask for a later decision with ``part.wake_at`` if one is needed."""
        ...

    def on_reconfigure(self, config: Mapping[str, Any], now: float) -> None:
        """Take a new config mid-run, at `now`: waiting and running jobs stay where they are,
        and whatever the policy derived from the old config must be re-derived for them.
        ``schedule(now)`` follows (``start`` and ``preempt`` raise here). Raises ConfigError (an
        InputError) on an invalid config."""
        ...
