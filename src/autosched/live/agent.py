"""The agent: the adaptive `Controller` run on a live cluster's history, with every change of the
cluster's configuration a revision in the store.

A round (`Agent.step`) is observe -> decide -> act (live/round.py has the data and the rules):
`observe` reconciles an apply that a killed process left half done, then reads the store, the
live settings, the cluster's setup (its twin: partitions, associations, flags; live/twin.py) and
the history, and turns a failed read into a typed block (Slurm down: retried after a back-off);
once the running change has been live for a period, it also replays that period's real jobs in
the twin under the config before the change and under the change (live/judge.py). `decide` (pure)
stops on a freeze, a hand edit, a change less than a period old, an open proposal or too little
history, judges the last change on that replay (a rollback when it did worse than the margin in
the counterfactual; a freeze, saying why, when the twin missed the period by more than
``max_twin_error``), or plans a tuning round; `act` carries the plan out: one Controller round
on the history turns a clear winner into a proposal (propose mode) or applies it (auto mode,
within per-knob bounds and a maximum step). The round (with the setup it read and what changed
in it) and the controller's memory (warm starts, pooled trials, drift reference) are recorded in
the store, so a round in a new process goes on where the last one stopped; a memory left on
another setup of the cluster is not used. The CLI and the HTTP service call the same actions
(approve, reject, rollback, freeze, unfreeze, adopt, status).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import AutoschedError
from .activity import Activity, ActivityKind, ActivitySink
from .approval import IncludePreview, apply_header, preview_of, same_diff
from .connector import Connector
from .errors import ActionNotAllowed, LiveError, SlurmUnavailable
from .history import LiveJobs, SeedHistory, observation, update_history
from .knobs import LiveSpace, live_space, same_value
from .round import (
    Action,
    Block,
    HistoryCounts,
    Observed,
    Plan,
    RollBack,
    RoundOutcome,
    RoundRecord,
    RoundRules,
    Stop,
    Tune,
    decide,
    judge_due,
    next_retry,
)
from .settings import AgentSettings, check_setup, prepare_cluster
from .status import AgentStatus, read_status
from .store import (
    Approval,
    Evidence,
    Flags,
    LiveOverride,
    Revision,
    RevisionKind,
    RevisionState,
    RevisionStore,
)
from .twin import ClusterSetup, setup_changes, twin_jobs

if TYPE_CHECKING:  # the controller pulls in the tuning stack: imported where a round tunes
    from ..adapt.controller import Controller, ControllerMemory


def make_connector(spec: Mapping[str, Any]) -> Connector:
    if spec.get("kind") == "slurm":
        from .slurm import SlurmConnector, SlurmRunner

        runner = SlurmRunner(spec.get("slurm_conf"), timeout=float(spec.get("timeout", 30.0)),
                             retries=int(spec.get("retries", 2)),
                             backoff=float(spec.get("backoff", 1.0)))
        return SlurmConnector(spec["include"], spec.get("slurm_conf"), runner)
    if spec.get("kind") == "fake":
        from .fake import FakeConnector

        return FakeConnector(spec["directory"])
    raise LiveError(f"connector {spec.get('kind')!r}: use slurm or fake")


class RoundAbandoned(BaseException):
    """A stop was asked (SIGTERM) while the round only read or tuned: it is given up, nothing of
    it recorded. (A BaseException, as KeyboardInterrupt: no handler of errors may catch it.)"""


class Agent:
    """The live loop's actions on one cluster (see the module doc)."""

    def __init__(self, state_dir: Path | str, settings: AgentSettings,
                 connector: Connector | None = None):
        self.state_dir = Path(state_dir)
        self.settings = settings
        self.store = RevisionStore(self.state_dir)
        self.connector = connector if connector is not None else make_connector(settings.connector)
        self.space: LiveSpace = live_space(settings.policy, settings.fixed)
        self.seed = SeedHistory(settings.seed_history) if settings.seed_history else None
        self._slurm: dict[str, dict[str, str] | None] = {}  # config (JSON) -> its Slurm spelling
        self.log: Callable[[str], None] = lambda msg: None
        self.sinks: list[ActivitySink] = []  # told every round and action (live/activity.py)
        self.stop_requested = False  # `request_stop` was called: no new round begins
        self._abandonable = 0  # > 0 while the round is in a part it may give up (`abandonable`)
        if settings.notify:
            from .notify import Webhook

            self.sinks.append(Webhook(settings.notify, str(self.state_dir), lambda m: self.log(m)))

    def _tell(self, activity: Activity) -> None:
        """Hand `activity` to every sink; a sink that fails is said in the log, never raised."""
        for sink in self.sinks:
            try:
                sink(activity)
            except Exception as e:  # noqa: BLE001 - a sink must not undo what was done
                self.log(f"{type(sink).__name__} failed on {activity.kind.value}: {e}")

    # -- stopping ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop as soon as it is safe (a SIGTERM handler calls this in the loop's thread): while
        the round reads, judges or tunes, at once (`RoundAbandoned` is raised here); while it writes to
        Slurm or the store (an apply, a restore), after that, which ends as it always does
        (applied, or restored)."""
        self.stop_requested = True
        if self._abandonable:
            raise RoundAbandoned("stop asked while the round read or tuned")

    @contextmanager
    def abandonable(self) -> Iterator[None]:
        """A part of a round that writes nothing to Slurm (a read, the judge's replay, the
        tuning): a stop asked meanwhile gives the round up. Raises at once when a stop was
        already asked."""
        if self.stop_requested:
            raise RoundAbandoned("stop asked")
        self._abandonable += 1
        try:
            yield
        finally:
            self._abandonable -= 1

    # -- status ---------------------------------------------------------------------------
    def status(self, history: int = 10, now: float | None = None) -> AgentStatus:
        """The agent at a glance (`read_status`): read from the store only, never from Slurm."""
        s = self.settings
        return read_status(self.store, history=history, mode="auto" if s.mode == "auto" else "propose",
                           policy=s.policy, period=s.period, connector=self.connector.describe(),
                           slurm=self.slurm_texts, now=now)

    def slurm_texts(self, config: Mapping[str, Any]) -> dict[str, str] | None:
        """Each managed knob of `config` as Slurm spells it (what `scontrol show config` shows),
        so that operators read 7-0, not 604800.0; None when this agent's knobs cannot translate
        `config` (a knob it does not know, a value out of range). Remembered per config: a
        revision's config never changes, and translating one validates the whole policy config."""
        key = json.dumps(config, sort_keys=True, default=str)
        if key not in self._slurm:
            try:
                self._slurm[key] = self.space.knob_texts(self.space.full(config))
            except (KeyError, ValueError):
                self._slurm[key] = None
            if len(self._slurm) > 512:
                self._slurm.pop(next(iter(self._slurm)))
        return self._slurm[key]

    # -- operator actions -----------------------------------------------------------------
    def preview(self, rev_id: int) -> IncludePreview:
        """The include file as approving proposal `rev_id` would write it, and its diff against
        the file now (live/approval.py). Writes nothing."""
        rev = self.store.get(rev_id)
        if rev.state is not RevisionState.PROPOSED:
            raise ActionNotAllowed(f"revision {rev_id} is {rev.state.value}; only a proposed "
                                   "revision can be approved")
        settings = self.space.to_settings(self.space.full(rev.config))
        return preview_of(rev.id, self.connector.preview(settings, header=apply_header(rev)))

    def approve(self, rev_id: int, actor: str, confirmed_diff: str | None = None,
                force: bool = False) -> Revision:
        """Apply proposal `rev_id` now (through the connector; checked, restored on failure),
        recording who approved and the include file's diff. With `confirmed_diff` (the diff the
        approver was shown, `preview`), refused unless the file would be written so. Refused
        over a hand edit (a live value that is not the running revision's) unless `force`: then
        the live values it discards are recorded with the apply (`Revision.overridden`)."""
        self.reconcile()
        rev = self.store.get(rev_id)
        if rev.state is not RevisionState.PROPOSED:
            raise ActionNotAllowed(f"revision {rev_id} is {rev.state.value}; only a proposed "
                                   "revision can be approved")
        flags = self.store.flags()
        if flags.frozen:
            raise ActionNotAllowed(f"the agent is frozen by {flags.frozen_by}"
                                   f"{': ' + flags.frozen_reason if flags.frozen_reason else ''}; "
                                   "unfreeze it first")
        running = self._running_or_baseline()
        if rev.parent != running.id:
            self._refuse_approve(rev_id, f"revision {rev_id} was proposed against revision "
                                 f"{rev.parent}, but revision {running.id} is running; reject "
                                 "it and let the agent propose again")
        edited = self.live_overrides(running)
        if edited and not force:
            self._refuse_approve(rev_id, self._edited_why(running, edited, "approve"))
        seen = self.preview(rev_id)
        if confirmed_diff is not None and not same_diff(confirmed_diff, seen.diff):
            raise ActionNotAllowed(f"the include file would now be written differently from the "
                                   f"diff confirmed for revision {rev_id}; look at it again")
        done = self._apply(rev, actor, f"approved by {actor}" + _forced(edited),
                           approval=Approval(actor, seen.diff, confirmed_diff is not None,
                                             time.time()), overridden=edited)
        self._tell(Activity(ActivityKind.APPROVE, actor, f"approved by {actor}", done))
        return done

    def _refuse_approve(self, rev_id: int, reason: str) -> NoReturn:
        """Refuse an approve with `reason`, unless the store moved on since the checks began:
        another process that approved the same revision at the same moment changes both the
        running revision and the live config, and the loser must say that, not report the
        winner's apply as a hand edit."""
        now = self.store.get(rev_id)
        if now.state is not RevisionState.PROPOSED:
            raise ActionNotAllowed(f"revision {rev_id} is {now.state.value}; only a proposed "
                                   "revision can be approved")
        if (intent := self.store.open_apply()) is not None and intent.owner_alive():
            raise ActionNotAllowed(f"revision {intent.rev_id} is being applied by pid "
                                   f"{intent.pid} right now; wait for it to finish")
        raise ActionNotAllowed(reason)

    def reject(self, rev_id: int, actor: str, reason: str = "") -> Revision:
        rev = self.store.transition(rev_id, RevisionState.REJECTED, actor=actor,
                                    note=reason or "rejected")
        self._tell(Activity(ActivityKind.REJECT, actor, reason or "rejected", rev))
        return rev

    def rollback(self, rev_id: int | None, actor: str, note: str = "",
                 force: bool = False) -> Revision:
        """Make the config of revision `rev_id` (None: the one applied before the running one)
        live again, as a new revision; the running one is marked rolled back. Allowed while
        frozen (it is how an operator gets back to a known state). Refused over a hand edit
        unless `force`, as `approve`."""
        self.reconcile()
        running = self._running_or_baseline()
        if rev_id is None:
            earlier = [r for r in self.store.history() if r.id != running.id and
                       r.applied_at is not None and r.id < running.id]
            if not earlier:
                raise ActionNotAllowed(f"revision {running.id} is the only one ever applied; "
                                       "there is nothing to roll back to")
            target = earlier[0]
        else:
            target = self.store.get(rev_id)
            if target.applied_at is None:
                raise ActionNotAllowed(f"revision {rev_id} was never applied ({target.state.value}); "
                                       "only a config that ran can be rolled back to")
        if target.id == running.id:
            raise ActionNotAllowed(f"revision {rev_id} is already running")
        # never apply blind: Slurm must answer, and show no hand edit, before anything is written
        edited = self.live_overrides(running)
        if edited and not force:
            raise ActionNotAllowed(self._edited_why(running, edited, "rollback"))
        if (p := self.store.pending()) is not None:
            self.store.transition(p.id, RevisionState.REJECTED, actor=actor,
                                  note=f"superseded by a rollback to revision {target.id}")
        new = self.store.create(target.config, kind=RevisionKind.ROLLBACK,
                                trigger=f"rollback to {target.id}", actor=actor,
                                note=note or f"rollback to revision {target.id}", parent=running.id,
                                evidence=Evidence(rollback_of=running.id, to=target.id))
        why = (note or f"rollback to revision {target.id} by {actor}") + _forced(edited)
        done = self._apply(new, actor, why, overridden=edited,
                           replaced_note=f"rolled back to revision {target.id} (revision {new.id}) "
                                         f"by {actor}{': ' + note if note else ''}")
        self._tell(Activity(ActivityKind.ROLLBACK, actor, why, done))
        return done

    def freeze(self, actor: str, reason: str = "") -> Flags:
        flags = self.store.freeze(actor, reason)
        self._tell(Activity(ActivityKind.FREEZE, actor, reason))
        return flags

    def unfreeze(self, actor: str) -> Flags:
        flags = self.store.unfreeze(actor)
        self._tell(Activity(ActivityKind.UNFREEZE, actor))
        return flags

    def adopt(self, actor: str, note: str = "") -> Revision:
        """Record the live settings, as they are now, as the running revision (after a hand edit
        the operator wants to keep); this clears the hand-edit block. It counts as a change: the
        agent changes nothing for a period after it."""
        self.reconcile()
        live = self.live_config()
        running = self.store.running()
        if running is not None and running.config == live:
            raise ActionNotAllowed(f"the live config already is revision {running.id}'s")
        if (p := self.store.pending()) is not None:
            self.store.transition(p.id, RevisionState.REJECTED, actor=actor,
                                  note="superseded: the live config was adopted")
        rev = self.store.create(live, kind=RevisionKind.ADOPTED, trigger="adopted", actor=actor,
                                note=note or "live settings adopted as they are")
        self.store.set_blocked("", actor)
        self._tell(Activity(ActivityKind.ADOPT, actor, note or "live settings adopted", rev))
        return rev

    # -- reading the cluster ----------------------------------------------------------------
    def live_values(self) -> dict[str, str]:
        """Slurm's managed settings now; each reading is recorded (`store.record_reading`: what
        the status shows as "in Slurm", and when), and clears a block that said Slurm did not
        answer."""
        live = self.connector.live_values()
        try:
            knobs = self.space.knob_texts(self.space.full(self.space.from_settings(live)))
        except (LiveError, KeyError, ValueError):
            knobs = None  # a value the agent cannot read: the hand-edit check says which
        if knobs is not None:
            self._saw_slurm(knobs)
        return live

    def _saw_slurm(self, knobs: Mapping[str, str]) -> None:
        self.store.record_reading(knobs)
        last = self.store.last_round()
        if last is not None:
            rec = RoundRecord.from_row(*last)
            # the newest round was blocked by something temporary (Slurm did not answer, an
            # apply could not be restored yet): Slurm answers now, so that block is over
            if rec.action == Action.BLOCKED.value and rec.retry_after is not None \
                    and self.store.flags().blocked == rec.why and self.store.open_apply() is None:
                self.store.set_blocked("")

    def live_config(self) -> dict[str, Any]:
        return self.space.from_settings(self.live_values())

    def _running_or_baseline(self) -> Revision:
        run = self.store.running()
        if run is not None:
            return run
        if self.store.history(1):
            raise ActionNotAllowed("no revision is known to be running (the last one was rolled "
                                   "back or failed without a replacement); adopt the live config")
        try:
            return self.store.create(self.live_config(), kind=RevisionKind.BASELINE,
                                     trigger="baseline", actor="agent", note="the config found live")
        except ActionNotAllowed:
            if (run := self.store.running()) is not None:
                return run  # another process recorded the baseline at the same moment
            raise

    def live_overrides(self, running: Revision,
                       live: Mapping[str, str] | None = None) -> tuple[LiveOverride, ...]:
        """The live settings (read now unless `live` is given) that are not the running
        revision's: each with its live and its expected text (none: no hand edit)."""
        live = dict(live if live is not None else self.live_values())
        want = self.space.to_settings(self.space.full(running.config))
        return tuple(LiveOverride(k, self.space.effective(k, live), v) for k, v in want.items()
                     if not same_value(k, self.space.effective(k, live), v))

    def _hand_edits(self, running: Revision, live: Mapping[str, str] | None = None) -> str:
        """"" if the live settings are the running revision's, else which differ."""
        return "; ".join(f"{o.setting} is {o.live} live, {o.expected} in revision {running.id}"
                         for o in self.live_overrides(running, live))

    @staticmethod
    def _edited_why(running: Revision, edited: tuple[LiveOverride, ...], action: str) -> str:
        shown = "; ".join(f"{o.setting} is {o.live} live, {o.expected} in revision {running.id}"
                          for o in edited)
        return (f"the live config differs from revision {running.id} ({shown}): a hand edit; "
                f"adopt or undo that edit first, or {action} with force (--force, the API's "
                "`force`) to discard the live values (recorded with the revision)")

    def refresh_include(self, running: Revision) -> list[str]:
        """Have the include file carry slurm.conf's own current entries that it shadows but the
        agent does not manage (`Connector.refresh`), rewritten for the running revision's
        settings; returns what changed. Nothing while another process applies."""
        if self.store.open_apply() is not None:
            return []  # that apply writes the file (merged) itself, or the next round does
        settings = self.space.to_settings(self.space.full(running.config))
        return self.connector.refresh(settings, header=apply_header(running))

    def shadowed(self, running: Revision) -> tuple[str, ...]:
        """Each managed setting that the cluster's own configuration (slurm.conf) sets to another
        value than the running revision's, which the include file shadows: an edit there does
        not take effect."""
        own = {k.lower(): v for k, v in self.connector.own_settings().items()}
        want = self.space.to_settings(self.space.full(running.config))
        return tuple(f"{k}={own[k.lower()]} in slurm.conf does not take effect: the agent's "
                     f"include file sets {k}={v} (revision {running.id}); change it through the "
                     "agent" for k, v in want.items()
                     if k.lower() in own and not same_value(k, own[k.lower()], v))

    def jobs(self, now: float) -> LiveJobs:
        """The history (cache updated with what sacct has since the last round, incrementally),
        plus the seed file's jobs the cluster no longer reports."""
        return update_history(self.state_dir, self.connector.sacct_rows, now,
                              self.settings.history, self.seed)

    def recorded_setup(self) -> ClusterSetup | None:
        """The cluster's setup as the newest round that read it recorded it (None: none did, or
        its record is not one; said in the log)."""
        row = self.store.last_round_with("setup")
        return None if row is None else self._setup_of(row[1])

    def _setup_of(self, summary: Mapping[str, Any]) -> ClusterSetup | None:
        """The setup a round's `summary` recorded (None: none, or not a setup; said in the log)."""
        if summary.get("setup") is None:
            return None
        try:
            return ClusterSetup.from_dict(summary["setup"])
        except LiveError as e:
            self.log(f"{self.store.path}: a round's recorded setup: {e}; not used")
            return None

    # -- applying ---------------------------------------------------------------------------
    def _apply(self, rev: Revision, actor: str, note: str, replaced_note: str = "",
               min_interval: float | None = None, approval: Approval | None = None,
               overridden: tuple[LiveOverride, ...] = ()) -> Revision:
        settings = self.space.to_settings(self.space.full(rev.config))
        snap = self.connector.snapshot()
        intent = self.store.begin_apply(rev.id, actor=actor, previous=snap,
                                        min_interval=min_interval)
        try:
            self.connector.apply(settings, header=apply_header(rev))
        except AutoschedError as e:
            self.store.end_apply(intent, state=RevisionState.FAILED, actor=actor,
                                 note=f"apply failed: {e}")
            raise
        except BaseException as e:
            # not an error the connector expected: put the old settings back before saying so
            try:
                self.connector.restore(snap)
                self.store.end_apply(intent, state=RevisionState.FAILED, actor=actor,
                                     note=f"apply interrupted ({type(e).__name__}); previous "
                                          "settings restored")
            except Exception:
                pass  # the intent stays open; the next start reconciles it
            raise
        self.store.end_apply(intent, state=RevisionState.APPLIED, actor=actor, note=note,
                             replaced_note=replaced_note, approval=approval,
                             overridden=overridden)
        # the connector read every value back before it returned: Slurm runs these now
        self._saw_slurm(self.space.knob_texts(self.space.full(rev.config)))
        return self.store.get(rev.id)

    def reconcile(self) -> str:
        """Finish what a killed process left: an apply that began and never ended is undone
        (the snapshot it saved is restored), so the include file and the store agree on the old
        config. Returns what was done ("" if nothing)."""
        intent = self.store.open_apply()
        if intent is None or intent.owner_alive():
            return ""
        try:
            self.connector.restore(intent.previous)
        except LiveError as e:
            why = (f"an apply of revision {intent.rev_id} was interrupted and its previous "
                   f"settings could not be restored yet: {e}")
            self.store.set_blocked(why)
            raise LiveError(why) from None
        note = (f"interrupted: the process applying it (pid {intent.pid}) stopped; the previous "
                "settings were restored on the next start")
        # a store written before the transition table may have moved the revision on meanwhile
        proposed = self.store.get(intent.rev_id).state is RevisionState.PROPOSED
        self.store.end_apply(intent, state=RevisionState.FAILED if proposed else None,
                             actor="agent:reconcile", note=note)
        return note

    # -- a round: observe -> decide -> act ----------------------------------------------------
    def step(self, trigger: str = "period", now: float | None = None) -> RoundOutcome:
        """One round now; returns (and records) what it found and did."""
        observed = self.observe(trigger, now)
        return self.act(decide(observed, self.rules(), observed.now), observed)

    def rules(self) -> RoundRules:
        s = self.settings
        return RoundRules(period=s.period, history=s.history, min_jobs=s.min_jobs, metric=s.metric,
                          margin=s.guard_margin, max_twin_error=s.max_twin_error)

    def observe(self, trigger: str = "period", now: float | None = None) -> Observed:
        """Every read a round makes, in order, stopping at the first that settles the round (see
        `Observed`); a failed read becomes a `Block`, temporary ones with a back-off."""
        last = self.store.last_round()
        previous = RoundRecord.from_row(*last).retry_after if last else None
        retry = next_retry(previous, self.settings.period)
        seen = Observed(now=self.connector.now() if now is None else now, trigger=trigger,
                        flags=Flags(), previous_retry=previous)
        try:
            self.reconcile()
        except LiveError as e:  # the cluster may run neither config: try again soon
            return replace(seen, flags=self.store.flags(), block=Block(str(e), retry))
        seen = replace(seen, flags=self.store.flags())
        if seen.flags.frozen:
            return seen
        try:
            with self.abandonable():
                live = self.live_values()
        except SlurmUnavailable as e:
            return replace(seen, block=Block(f"Slurm does not answer: {e}", retry))
        try:
            running = self._running_or_baseline()
        except ActionNotAllowed as e:
            return replace(seen, block=Block(str(e)))
        seen = replace(seen, running=running, hand_edits=self._hand_edits(running, live))
        if seen.hand_edits:
            return seen
        try:
            seen = replace(seen, merged=tuple(self.refresh_include(running)),
                           shadowed=self.shadowed(running))
        except SlurmUnavailable as e:
            return replace(seen, block=Block(f"Slurm does not answer: {e}", retry))
        except LiveError as e:
            return replace(seen, block=Block(f"cannot bring the include file up to date with "
                                             f"slurm.conf: {e}"))
        try:
            with self.abandonable():
                setup = self.connector.setup()
        except SlurmUnavailable as e:
            return replace(seen, block=Block(f"Slurm does not answer: {e}", retry))
        except LiveError as e:
            return replace(seen, block=Block(f"cannot read the cluster's setup: {e}"))
        seen = replace(seen, setup=setup, setup_changes=tuple(setup_changes(self.recorded_setup(), setup)))
        try:
            with self.abandonable():
                jobs = self.jobs(seen.now)
        except SlurmUnavailable as e:
            return replace(seen, block=Block(f"Slurm does not answer: {e}", retry))
        except LiveError as e:
            return replace(seen, block=Block(f"cannot read the history: {e}"))
        kept, left_out = twin_jobs(jobs, setup)
        seen = replace(seen, jobs=kept, left_out=left_out, pending=self.store.pending())
        if judge_due(running, self.rules(), seen.now):
            return self._replay_period(seen, running, setup)
        return seen

    def _replay_period(self, seen: Observed, running: Revision, setup: ClusterSetup) -> Observed:
        """`seen` with the judge's replay of the period after `running` went live, under its
        parent's config and its own (live/judge.py); or, when the replay cannot be made, why."""
        from .judge import counterfactual

        assert running.applied_at is not None and running.parent is not None and seen.jobs is not None
        change = running.applied_at
        try:
            space = self.twin_space(setup)
            old, new = (space.full(c) for c in (self.store.get(running.parent).config, running.config))
            with self.abandonable():  # five replays of a period: minutes on a busy cluster
                cf = counterfactual(seen.jobs, setup.cluster_spec(), self.settings.policy, old, new,
                                    change, change + self.settings.period, seen.now, self.settings.seed)
        except AutoschedError as e:
            return replace(seen, unjudged=f"the twin could not replay the period: {e}")
        return replace(seen, counterfactual=cf)

    def act(self, plan: Plan, observed: Observed) -> RoundOutcome:
        """Carry `plan` out and record the round (with the controller's memory when it tuned)."""
        running, memory = observed.running, None
        if plan.judged is not None and running is not None:
            self.store.record_outcome(running.id, plan.judged)
        if isinstance(plan, Stop):
            if plan.blocked is not None:
                self.store.set_blocked(plan.blocked)
            if plan.freeze is not None:
                self.freeze("agent:judge", plan.freeze)
            out = RoundOutcome(plan.action, plan.why, retry_after=plan.retry_after)
        elif isinstance(plan, RollBack):
            try:
                rev = self.rollback(plan.to, "agent:guard", note=plan.why)
                out = RoundOutcome(Action.ROLLED_BACK, plan.why, revision=rev.id)
            except LiveError as e:
                out = RoundOutcome(Action.ROLLBACK_FAILED, str(e), retry_after=self._retry(e, observed))
        else:
            self.store.set_blocked("")
            out, memory = self._tune(observed, plan)
        jobs = observed.jobs
        counts = None if jobs is None else HistoryCounts(jobs=int(len(jobs)), finished=int(jobs.finished.sum()),
                                                         malformed_rows=jobs.malformed,
                                                         left_out=dict(observed.left_out))
        out = replace(out, trigger=observed.trigger, history=counts, setup=observed.setup,
                      setup_changes=observed.setup_changes, merged=observed.merged,
                      shadowed=observed.shadowed)
        self.store.record_round(out.to_summary(), memory=memory)
        for change in out.setup_changes:
            self.log(f"cluster setup changed: {change}")
        for said in (*(out.merged or ()), *(out.shadowed or ())):
            self.log(said)
        self._tell(Activity(ActivityKind.ROUND, "agent", out.why, action=out.action.value,
                            trigger=out.trigger, blocked_before=observed.flags.blocked,
                            revision=self.store.get(out.revision) if out.revision else None))
        return out

    def _retry(self, e: LiveError, observed: Observed) -> float | None:
        """After an action failed: a back-off when Slurm did not answer (it may soon), else None."""
        return next_retry(observed.previous_retry, self.settings.period) if isinstance(e, SlurmUnavailable) else None

    def _tune(self, observed: Observed, plan: Tune) -> tuple[RoundOutcome, str | None]:
        """One Controller round on the history; a clear winner becomes a proposal (applied in
        auto mode). Returns what it did and the controller's memory after it (JSON)."""
        s, running = self.settings, plan.running
        try:
            with self.abandonable():
                obs, origin = observation(plan.jobs, observed.now, s.history, seed=s.seed,
                                          backlog_history=s.backlog_history)
                ctl = self._controller(running, plan.setup)
                d = ctl.decide(obs, trigger=observed.trigger)
        except SlurmUnavailable as e:
            return RoundOutcome(Action.BLOCKED, f"Slurm does not answer: {e}",
                                retry_after=self._retry(e, observed)), None
        except AutoschedError as e:
            return RoundOutcome(Action.TUNING_FAILED, f"tuning failed: {e}"), None
        memory = ctl.memory().to_json()
        evidence = Evidence(
            predicted_gain=d.predicted_gain, spread=d.spread, samples=d.samples,
            validation_samples=len(d.validation_seeds), tuning_cost=d.tuning_cost,
            causal_graph=d.causal_graph, screened_knobs=d.screened_knobs, metric=s.metric,
            running_value=d.running_value, candidate_value=d.candidate_value, reason=d.reason,
            tuning_seconds=d.tuning_seconds, history_jobs=d.history_jobs,
            imputed_durations=d.imputed_durations, history_origin=origin,
            model=s.model if s.time_scale == 1 or s.model == "replay" else f"{s.model} at time scale {s.time_scale:g}",
            dropped_knobs=list(d.dropped_knobs), knob_shares=dict(d.knob_shares))
        if not d.deployed or d.candidate is None:
            return RoundOutcome(Action.NONE, d.reason, evidence=evidence), memory
        new = self.space.quantized(d.candidate)
        if new == running.config:
            return RoundOutcome(Action.NONE, "the winner rounds to the running config in Slurm's units",
                                evidence=evidence), memory
        actor = "agent:auto" if s.mode == "auto" else "agent:propose"
        try:
            rev = self.store.create(new, kind=RevisionKind.PROPOSAL, trigger=observed.trigger,
                                    actor=actor, evidence=evidence, note=d.reason, parent=running.id)
        except ActionNotAllowed as e:  # another process proposed since this round looked
            return RoundOutcome(Action.WAIT, str(e)), memory
        if s.mode == "propose":
            return RoundOutcome(Action.PROPOSED, d.reason, revision=rev.id), memory
        try:
            self._apply(rev, actor, f"applied in auto mode: {d.reason}", min_interval=s.period)
        except ActionNotAllowed as e:
            # another agent's change went live since this round looked: this one is stale
            self.store.transition(rev.id, RevisionState.REJECTED, actor=actor, note=f"not applied: {e}")
            return RoundOutcome(Action.WAIT, f"revision {rev.id} not applied: {e}", revision=rev.id), memory
        except LiveError as e:
            return RoundOutcome(Action.APPLY_FAILED, str(e), revision=rev.id,
                                retry_after=self._retry(e, observed)), memory
        return RoundOutcome(Action.APPLIED, d.reason, revision=rev.id), memory

    # -- the controller and its memory --------------------------------------------------------
    def _new_controller(self, running: Revision, setup: ClusterSetup) -> Controller:
        """A Controller as the settings say, simulating the cluster `setup` describes, running
        `running`'s config and tuning the live view of the policy (fixed knobs pinned, those the
        cluster sets - PriorityFlags - as it sets them; managed ones within the bounds and, in
        auto mode, the maximum step from the running values)."""
        from ..adapt.controller import Controller
        from ..adapt.sources import ReplaySource
        from ..export.live import live_subspace

        s = self.settings
        space = self.twin_space(setup)
        full = space.full(running.config)
        bounds = {k: (float(v[0]), float(v[1])) for k, v in s.bounds.items()}
        # The controller tunes the live part of the policy's space (fixed knobs pinned, managed
        # ones bounded), built as `autosched run --live-knobs` builds it.
        subspace = live_subspace(s.policy, space.fixed, full, bounds, s.max_step if s.mode == "auto" else None)
        source = ReplaySource() if s.model == "replay" else s.model_source()
        return Controller(s, setup.cluster_spec(), source, initial_config=full, subspace=subspace,
                          drift_window=s.period, smallest_change=True)

    def twin_space(self, setup: ClusterSetup) -> LiveSpace:
        """The policy's knobs as the twin of the cluster `setup` describes simulates them
        (`twin.twin_space`, with the settings' fixed values)."""
        from .twin import twin_space

        return twin_space(self.settings.policy, self.settings.fixed, setup)

    def _controller(self, running: Revision, setup: ClusterSetup) -> Controller:
        """The round's Controller, going on from the memory the last tuning round left (unless
        that round simulated another setup of the cluster: its trials and winners were
        simulated on a cluster that is not this one)."""
        ctl = self._new_controller(running, setup)
        if (memory := self.memory(setup)) is not None:
            ctl.restore(memory)
        return ctl

    def memory(self, setup: ClusterSetup | None = None) -> ControllerMemory | None:
        """The controller's memory in the store (None: no round tuned yet, one of another policy,
        or, given the cluster's `setup`, one left by a round that simulated another cluster; an
        unreadable one is said in the log and not used)."""
        from ..adapt.controller import ControllerMemory
        from ..adapt.errors import AdaptError

        got = self.store.controller_memory_round()
        if got is None:
            return None
        text, summary = got
        if setup is not None and (was := self._setup_of(summary)) is not None \
                and was.cluster_spec() != setup.cluster_spec():
            self.log("the cluster's setup changed since the last tuning round; this round starts "
                     "without its memory")
            return None
        try:
            memory = ControllerMemory.from_json(text)
        except AdaptError as e:
            self.log(f"{self.store.path}: {e}; the next round starts without it")
            return None
        return memory if memory.policy == self.settings.policy else None

    def drifted(self, now: float | None = None) -> str:
        """Why the workload drifted since the last tuning round ("" if it did not, or no round
        tuned yet). Called between rounds by `run`; reads the drift reference from the store, so
        it works in a process that has not tuned itself."""
        memory = self.memory()
        running = self.store.running()
        if memory is None or memory.reference is None or running is None:
            return ""
        # the setup the last round read (the rounds read it; a poll only reads the history)
        setup = self.recorded_setup() or self.connector.setup()
        now = self.connector.now() if now is None else now
        jobs, _ = twin_jobs(self.jobs(now), setup)
        obs, _ = observation(jobs, now, self.settings.history, seed=self.settings.seed,
                             backlog_history=self.settings.backlog_history)
        ctl = self._new_controller(running, setup)
        ctl.restore(memory)
        rep = ctl.check_drift(obs)
        return rep.reason if rep is not None and rep.drifted else ""

    def run(self, rounds: int | None = None, poll: float | None = None,
            should_stop: Callable[[], bool] = lambda: False,
            sleep: Callable[[float], object] = time.sleep,
            clock: Callable[[], float] = time.monotonic) -> list[RoundOutcome]:
        """Rounds every period (and on drift, checked every `poll` s) until `rounds` rounds ran or
        `should_stop()` (or `request_stop`: a round that only reads or tunes then is given up).
        After a round that says when to try again (`retry_after`: Slurm did not answer), the
        next comes then. Returns the rounds' outcomes."""
        try:
            return self._run(rounds, poll, should_stop, sleep, clock)
        except RoundAbandoned as e:
            self.log(f"stopped: {e}; the round is given up, nothing of it recorded")
            return []

    def _run(self, rounds: int | None, poll: float | None, should_stop: Callable[[], bool],
             sleep: Callable[[float], object], clock: Callable[[], float]) -> list[RoundOutcome]:
        period = self.settings.period
        poll = poll if poll is not None else max(30.0, min(period / 4, 600.0))
        done: list[RoundOutcome] = []
        trigger = "period"
        started = time.time()
        while not (should_stop() or self.stop_requested) and (rounds is None or len(done) < rounds):
            self.store.beat(poll, started)
            out = self.step(trigger)
            done.append(out)
            if rounds is not None and len(done) >= rounds:
                break
            wait = out.retry_after if out.retry_after is not None else period
            trigger = "period"
            deadline = clock() + wait
            while clock() < deadline and not (should_stop() or self.stop_requested):
                sleep(max(0.0, min(poll, deadline - clock())))
                if should_stop() or self.stop_requested:
                    break
                self.store.beat(poll, started)
                if clock() >= deadline or self.store.flags().frozen:
                    continue  # the round reads Slurm now; a frozen agent asks it nothing
                try:  # a look at Slurm: the age of the last observation, a stale block cleared
                    with self.abandonable():
                        self.live_values()
                except LiveError:
                    pass
                if self.settings.drift and clock() < deadline and not self.stop_requested:
                    try:
                        with self.abandonable():
                            why = self.drifted()
                    except LiveError:
                        why = ""
                    if why:
                        trigger = f"drift: {why}"
                        break
        return done


def _forced(edited: tuple[LiveOverride, ...]) -> str:
    """What an apply's note adds when it was forced over a hand edit."""
    if not edited:
        return ""
    return "; forced over a hand edit, discarding " + ", ".join(
        f"{o.setting}={o.live}" for o in edited)


def init_agent(state_dir: Path | str, settings: AgentSettings,
               connector: Connector | None = None) -> Agent:
    """Create (or re-configure) an agent in `state_dir`. Everything is checked before anything is
    written (the settings when they were made; here the connector and the cluster's setup,
    `check_setup`), and ``settings.json``, which makes the directory an agent's, is written last,
    atomically: a refused init leaves no agent behind, and a re-initialised one its old settings."""
    state_dir = Path(state_dir)
    connector = connector if connector is not None else make_connector(settings.connector)
    check_setup(settings)
    prepare_cluster(settings)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LiveError(f"{state_dir}: cannot write the agent's settings: {e.strerror or e}") from None
    agent = Agent(state_dir, settings, connector)
    try:
        settings.save(state_dir)
    except OSError as e:
        raise LiveError(f"{state_dir}: cannot write the agent's settings: {e.strerror or e}") from None
    return agent


def read_only(state_dir: Path | str) -> tuple[AgentSettings, Connector]:
    """The settings saved in `state_dir` and a connector to the cluster they name, for a command
    that only reads (``agent twin``): no store is opened, nothing is reconciled or written."""
    settings = AgentSettings.load(Path(state_dir))
    return settings, make_connector(settings.connector)


def open_agent(state_dir: Path | str, connector: Connector | None = None) -> Agent:
    """The agent saved in `state_dir` by init (connector, policy, period, mode). Opening only
    reads: an apply a killed process left open is reconciled by `start_agent` (``agent run``,
    ``agent serve``), by each round and by each action, never by a read such as a status."""
    return Agent(state_dir, AgentSettings.load(Path(state_dir)), connector)


def start_agent(state_dir: Path | str, connector: Connector | None = None,
                log: Callable[[str], None] | None = None) -> Agent:
    """`open_agent` for a process that acts (``agent run``, ``agent serve``): it first finishes
    what a killed process left (`Agent.reconcile`); when that fails (Slurm does not answer),
    the block says so, and each round and action tries again."""
    agent = open_agent(state_dir, connector)
    if log is not None:
        agent.log = log
    try:
        agent.reconcile()
    except LiveError as e:
        agent.log(str(e))
    return agent

