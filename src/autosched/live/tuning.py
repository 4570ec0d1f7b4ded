"""The agent's tuning: the `Controller` it runs on the live history, the memory that carries it
from one round (and one process) to the next, and the checks between rounds (contention, drift).

The controller simulates the cluster as the round read its setup (`ClusterSetup.cluster_spec`)
and tunes the live part of the policy's space (`export.live.live_subspace`). Its memory (warm
starts, pooled trials, the drift reference) is kept in the store with the round that tuned; a
memory of another policy, or one left by a round that simulated another setup of the cluster,
is not used.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .activity import Listeners
from .history import observation
from .records import Evidence, Revision, RevisionKind
from .restraint import cooling
from .round import Observed, Tune
from .twin import ClusterSetup, twin_jobs
from .view import ClusterView

if TYPE_CHECKING:  # the controller pulls in the tuning stack: imported where a round tunes
    from ..adapt.controller import Controller, ControllerMemory, Decision


class Tuning:
    """The Controller of an agent's rounds, and its memory (see the module doc)."""

    def __init__(self, view: ClusterView, listeners: Listeners):
        self.view, self.listeners = view, listeners
        self.settings, self.store = view.settings, view.store

    def run(self, observed: Observed, plan: Tune) -> tuple[Decision, Evidence, str]:
        """One Controller round on the planned history, going on from the stored memory: its
        decision, the evidence a revision records of it, and the memory after it (JSON). A
        config an operator rejected within the cooldown is not offered (`restraint.cooling`)."""
        s = self.settings
        obs, origin = observation(plan.jobs, observed.now, s.history, seed=s.seed,
                                  backlog_history=s.backlog_history)
        ctl = self.controller(plan.running, plan.setup)
        d = ctl.decide(obs, trigger=observed.trigger, avoid=lambda c: self.cooling(c, observed.now))
        evidence = self.evidence(d, origin)
        if observed.backfill is not None:  # what backfill costs before the change
            evidence = replace(evidence, backfill=observed.backfill.to_dict())
        return d, evidence, ctl.memory().to_json()

    def cooling(self, config: Mapping[str, Any], now: float) -> str:
        """Why `config` (a whole config of the policy) is not proposed now ("": it may be): an
        operator rejected it, as Slurm would run it, within the cooldown."""
        managed = self.view.space.quantized(config)
        hit = cooling(self.store.history(), managed, now, self.settings.cooldown_seconds)
        if hit is None:
            return ""
        rejected = hit.events[-1]
        return (f"rejected by {rejected.actor} as revision {hit.id}; not proposed again until "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(rejected.time + self.settings.cooldown_seconds))}")

    def evidence(self, d: Decision, origin: float) -> Evidence:
        """What a revision (or a round that proposed nothing) records of the decision `d` made
        on a history whose times count from `origin` (`Evidence.from_decision`)."""
        s = self.settings
        model = s.model if s.time_scale == 1 or s.model == "replay" else \
            f"{s.model} at time scale {s.time_scale:g}"
        return Evidence.from_decision(d, metric=s.metric, history_origin=origin, model=model)

    def new_controller(self, running: Revision, setup: ClusterSetup) -> Controller:
        """A Controller as the settings say, simulating the cluster `setup` describes, running
        `running`'s config and tuning the live view of the policy (fixed knobs pinned, those the
        cluster sets - PriorityFlags - as it sets them; managed ones within the bounds and, in
        auto mode, the maximum step from the running values)."""
        from ..adapt.controller import Controller
        from ..adapt.sources import ReplaySource
        from ..adapt.trigger import ContentionTrigger
        from ..export.live import live_subspace

        s = self.settings
        space = self.view.twin_space(setup)
        full = space.full(running.config)
        bounds = {k: (float(v[0]), float(v[1])) for k, v in s.bounds.items()}
        # The controller tunes the live part of the policy's space (fixed knobs pinned, managed
        # ones bounded), built as `autosched run --live-knobs` builds it.
        subspace = live_subspace(s.policy, space.fixed, full, bounds, s.max_step if s.mode == "auto" else None)
        source = ReplaySource() if s.model == "replay" else s.model_source()
        # The trigger's floor is GPU-hours of the jobs' own time; a test bed's queue is on its
        # clock, `time_scale` times shorter.
        trigger = ContentionTrigger(floor_hours=ContentionTrigger.floor_hours / s.time_scale)
        own = self.operator_config()
        return Controller(s, setup.cluster_spec(), source, initial_config=full, subspace=subspace,
                          drift_window=s.period, smallest_change=True, contention_gap=0.0, trigger=trigger,
                          baseline=None if own is None else space.full(own.config))

    def operator_config(self) -> Revision | None:
        """The newest config the operator set, the one a change keeps the policy against beside
        the running one: the config the agent found live, or a hand edit it adopted."""
        own = (RevisionKind.BASELINE, RevisionKind.ADOPTED)
        return next((r for r in self.store.history() if r.kind in own), None)

    def controller(self, running: Revision, setup: ClusterSetup) -> Controller:
        """The round's Controller, going on from the memory the last tuning round left (unless
        that round simulated another setup of the cluster: its trials and winners were
        simulated on a cluster that is not this one)."""
        ctl = self.new_controller(running, setup)
        if (memory := self.memory(setup)) is not None:
            self._restore(ctl, memory)
        return ctl

    def _restore(self, ctl: Controller, memory: ControllerMemory) -> bool:
        """`ctl` going on from `memory`; a memory it cannot take (edited, damaged) is said in the
        log and not used (the round goes on without it, and its own memory replaces it)."""
        from ..adapt.errors import AdaptError

        try:
            ctl.restore(memory)
        except AdaptError as e:
            self.listeners.say(f"{self.store.path}: {e}; this round starts without it")
            return False
        return True

    def memory(self, setup: ClusterSetup | None = None) -> ControllerMemory | None:
        """The controller's memory in the store (None: no round tuned yet, one of another policy,
        or, given the cluster's `setup`, one left by a round that simulated another cluster; an
        unreadable one is said in the log and not used)."""
        from ..adapt.controller import ControllerMemory
        from ..adapt.errors import AdaptError

        got = self.store.controller_memory_round()
        if got is None:
            return None
        text, left_by = got
        if setup is not None and (was := self.view.setup_of(left_by)) is not None \
                and was.cluster_spec() != setup.cluster_spec():
            self.listeners.say("the cluster's setup changed since the last tuning round; this "
                               "round starts without its memory")
            return None
        try:
            memory = ControllerMemory.from_json(text)
        except AdaptError as e:
            self.listeners.say(f"{self.store.path}: {e}; this round starts without it")
            return None
        return memory if memory.policy == self.settings.policy else None

    def drifted(self, now: float | None = None) -> str:
        """Why a round should run before its time ("" if not, or no round tuned yet): the queue
        grew past what the last round saw ("contention: ...", with the trigger on), or the
        workload drifted ("drift: ...", with drift on). Called between rounds by the loop; reads
        the last round's queue and drift reference from the store, so it works in a process that
        has not tuned itself."""
        s = self.settings
        memory = self.memory()
        running = self.store.running()
        if memory is None or running is None or not (s.trigger or (s.drift and memory.reference is not None)):
            return ""
        # the setup the last round read (the rounds read it; a poll only reads the history)
        setup = self.view.recorded_setup() or self.view.connector.setup()
        now = self.view.connector.now() if now is None else now
        jobs, _ = twin_jobs(self.view.jobs(now), setup)
        obs, _ = observation(jobs, now, self.settings.history, seed=self.settings.seed,
                             backlog_history=self.settings.backlog_history)
        ctl = self.new_controller(running, setup)
        if not self._restore(ctl, memory):
            return ""
        if why := ctl.check_contention(obs):
            return f"contention: {why}"
        rep = ctl.check_drift(obs)
        return f"drift: {rep.reason}" if rep is not None and rep.drifted else ""
