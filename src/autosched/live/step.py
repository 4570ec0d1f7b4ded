"""One round of the agent: observe -> decide -> act (`RoundStep.step`).

`Observer.observe` reads; `round.decide` (pure) plans; `act` carries the plan out and records
the round: a stop (with the judge's record, its block note or freeze), the guard's rollback, or
a tuning round whose clear winner becomes a proposal (applied in auto mode). A part that fails
ends the round as `live.failures` says for the error's type.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from .actions import OperatorActions
from .activity import Activity, ActivityKind, Listeners
from .applying import Applier
from .errors import ActionNotAllowed
from .failures import Part, caught, failure
from .observe import Observer
from .records import Evidence, RevisionKind, RevisionState
from .restraint import brake, calibration
from .round import (
    Action,
    HistoryCounts,
    Observed,
    Plan,
    RollBack,
    RoundOutcome,
    RoundRules,
    Stop,
    Tune,
    decide,
    next_retry,
)
from .stopping import Stopping
from .tuning import Tuning


class RoundStep:
    """An agent's rounds (see the module doc)."""

    def __init__(self, observer: Observer, actions: OperatorActions, applier: Applier,
                 tuning: Tuning, stopping: Stopping, listeners: Listeners,
                 rules: Callable[[], RoundRules]):
        self.observer, self.actions, self.applier, self.tuning = observer, actions, applier, tuning
        self.stopping, self.listeners, self.rules = stopping, listeners, rules
        self.view = observer.view
        self.store, self.settings = self.view.store, self.view.settings
        self._started: float | None = None  # when the round `step` runs began (monotonic)

    def step(self, trigger: str = "period", now: float | None = None) -> RoundOutcome:
        """One round now; returns (and records) what it found and did."""
        self._started = time.monotonic()
        observed = self.observer.observe(trigger, now)
        return self.act(decide(observed, self.rules(), observed.now), observed)

    def act(self, plan: Plan, observed: Observed) -> RoundOutcome:
        """Carry `plan` out and record the round (with the controller's memory when it tuned)."""
        running, memory = observed.running, None
        if plan.judged is not None and running is not None:
            self.store.record_outcome(running.id, plan.judged)
        if isinstance(plan, Stop):
            if plan.blocked is not None:
                self.store.set_blocked(plan.blocked)
            if plan.freeze is not None:
                self.actions.freeze("agent:judge", plan.freeze)
            out = RoundOutcome(plan.action, plan.why, retry_after=plan.retry_after)
        elif isinstance(plan, RollBack):
            try:
                rev = self.actions.rollback(plan.to, "agent:guard", note=plan.why)
                out = RoundOutcome(Action.ROLLED_BACK, plan.why, revision=rev.id)
            except caught(Part.ROLLBACK) as e:
                out = failure(Part.ROLLBACK, e, self._retry(observed)).outcome()
        else:
            self.store.set_blocked("")
            out, memory = self._tune(observed, plan)
            if out.action is Action.TUNING_FAILED:
                # a round that cannot tune changes nothing, round after round: a block the
                # status, the page, /metrics and the webhook say (until a round tunes again)
                self.store.set_blocked(out.why)
        return self._record(out, observed, memory)

    def _record(self, out: RoundOutcome, observed: Observed, memory: str | None) -> RoundOutcome:
        """`out` with what the round observed, recorded and told to the listeners."""
        started = self._started
        out = replace(out, trigger=observed.trigger, history=_counts(observed), setup=observed.setup,
                      setup_changes=observed.setup_changes, merged=observed.merged,
                      shadowed=observed.shadowed, backfill=observed.backfill,
                      seconds=None if started is None else time.monotonic() - started)
        self.store.record_round(out.to_summary(), memory=memory)
        for change in out.setup_changes:
            self.listeners.say(f"cluster setup changed: {change}")
        for said in (*(out.merged or ()), *(out.shadowed or ())):
            self.listeners.say(said)
        if out.merged:  # the include file was rewritten and Slurm reconfigured
            self.listeners.tell(Activity(ActivityKind.INCLUDE, "agent", "; ".join(out.merged)))
        self.listeners.tell(Activity(ActivityKind.ROUND, "agent", out.why, action=out.action.value,
                                     trigger=out.trigger, blocked_before=observed.flags.blocked,
                                     revision=self.store.get(out.revision) if out.revision else None,
                                     seconds=out.seconds))
        return out

    def _retry(self, observed: Observed) -> float:
        """The wait before the next round when this one failed on something temporary."""
        return next_retry(observed.previous_retry, self.settings.period)

    def _tune(self, observed: Observed, plan: Tune) -> tuple[RoundOutcome, str | None]:
        """One Controller round on the history; a clear winner becomes a proposal (applied in
        auto mode). Returns what it did and the controller's memory after it (JSON)."""
        s, running = self.settings, plan.running
        try:
            with self.stopping.abandonable():
                d, evidence, memory = self.tuning.run(observed, plan)
        except caught(Part.TUNE) as e:
            return failure(Part.TUNE, e, self._retry(observed)).outcome(), None
        if not d.deployed or d.candidate is None:
            return RoundOutcome(Action.NONE, d.reason, evidence=evidence), memory
        new = self.view.space.quantized(d.candidate)
        if new == running.config:
            return RoundOutcome(Action.NONE, "the winner rounds to the running config in Slurm's units",
                                evidence=evidence), memory
        if why := self.tuning.cooling(d.candidate, observed.now):  # (the portfolio left it out)
            return RoundOutcome(Action.NONE, f"the winner was {why}", evidence=evidence), memory
        held = self.held_back(evidence)
        auto = s.mode == "auto" and not held
        actor = "agent:auto" if auto else "agent:propose"
        evidence = replace(evidence, held=held or None)
        try:
            rev = self.store.create(new, kind=RevisionKind.PROPOSAL, trigger=observed.trigger,
                                    actor=actor, evidence=evidence, note=d.reason, parent=running.id)
        except caught(Part.PROPOSE) as e:
            return failure(Part.PROPOSE, e, self._retry(observed)).outcome(), memory
        if not auto:
            why = d.reason if not held else f"{d.reason}; proposed, not applied: {held}"
            return RoundOutcome(Action.PROPOSED, why, revision=rev.id), memory
        try:
            self.applier.apply(rev, actor, f"applied in auto mode: {d.reason}", min_interval=s.period)
        except caught(Part.APPLY) as e:
            if isinstance(e, ActionNotAllowed):  # stale: another agent's change went live
                self.store.transition(rev.id, RevisionState.REJECTED, actor=actor,
                                      note=f"not applied: {e}")
            return failure(Part.APPLY, e, self._retry(observed), revision=rev.id).outcome(rev.id), memory
        return RoundOutcome(Action.APPLIED, d.reason, revision=rev.id), memory


    def held_back(self, evidence: Evidence) -> str:
        """Why auto mode proposes this round's winner instead of applying it ("": it applies, or
        the agent is in propose mode): evidence without a spread (the replay model, or one
        workload left to judge on), or the brake, the last judged changes' predictions having
        overshot (live/restraint.py)."""
        s = self.settings
        if s.mode != "auto":
            return ""
        if not s.single_replay() and (evidence.validation_samples or 0) < 2:
            return "the guardrail judged on one workload: no spread measured"
        return s.single_replay() or brake(calibration(self.store.history()), s.brake)


def _counts(observed: Observed) -> HistoryCounts | None:
    """The history a round read, in numbers (None: it stopped before reading it)."""
    jobs = observed.jobs
    if jobs is None:
        return None
    return HistoryCounts(jobs=int(len(jobs)), finished=int(jobs.finished.sum()),
                         malformed_rows=jobs.malformed, left_out=dict(observed.left_out))
