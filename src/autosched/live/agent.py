"""The agent: the adaptive `Controller` run on a live cluster's history, with every change of the
cluster's configuration a revision in the store.

A round (``step``): reconcile an apply that a killed process left half done; stop if frozen;
read the live settings (Slurm down -> blocked, nothing applied blind); stop if they differ from
the running revision (a hand edit -> blocked, said so); judge the last change once a period has
passed (observed vs the period before; worse by more than the guardrail's margin -> automatic
rollback); at most one change per period; with too little history say so and propose nothing;
else run one Controller round on the history and turn a winner into a proposal (propose mode) or
apply it (auto mode, within per-knob bounds and a maximum step). The CLI and the HTTP service
call the same actions (approve, reject, rollback, freeze, unfreeze, adopt, status).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..adapt.observe import BACKLOG_HISTORY
from ..atomic import write_text_atomic
from ..errors import AutoschedError
from ..jsonable import jsonable
from .connector import Connector
from .errors import ActionNotAllowed, LiveError, SlurmUnavailable
from .history import LiveJobs, combine, merge_sacct, observation, period_metrics, prune_sacct, read_jobs, seed_jobs
from .knobs import LiveSpace, live_space, same_value
from .store import Evidence, Flags, Outcome, Revision, RevisionState, RevisionStore, RollbackEvidence

SETTINGS_FILE = "settings.json"
HISTORY_FILE = "history.sacct"
MODES = ("propose", "auto")
OVERLAP = 900.0  # s of history fetched again each round: jobs that changed state since


@dataclass
class AgentSettings:
    """What ``agent init`` saves in the state directory (``settings.json``)."""

    connector: dict[str, Any]  # {"kind": "slurm", "include": ..., "slurm_conf": ...} | {"kind": "fake", "directory": ...}
    policy: str = "multifactor"
    period: float = 86400.0  # s between rounds
    mode: str = "propose"
    history: float = 7 * 86400.0  # s of history each round learns from
    min_jobs: int = 50  # finished jobs in the history below which nothing is proposed
    metric: str = "avg_jct"
    budget: int = 20
    model: str = "stat"  # workload model, or "replay"
    samples: int = 3
    # fresh samples (not the tuner's) the guardrail judges a winner on: cheap, two configs each
    validation_samples: int = 8
    margin: float = 0.02  # guardrail: predicted gain needed, and observed loss that rolls back
    k: float = 2.0  # guardrail: gain > k x standard error
    screening: bool = False  # causal screening in the tuner (needs causal-learn)
    drift: bool = True  # `agent run` also starts a round when the workload drifts
    bounds: dict[str, list[float]] = field(default_factory=dict)  # auto mode: knob -> [lo, hi]
    max_step: float = 0.25  # auto mode: fraction of a knob's range one round may move it
    fixed: dict[str, Any] = field(default_factory=dict)  # values of the non-live knobs
    seed_history: str | None = None  # a sacct export that seeds the history
    seed: int = 0
    # evaluation workloads keep each running or pending job's past (run time x GPUs, age); a
    # state directory saved before this field existed gets the default
    backlog_history: bool = BACKLOG_HISTORY

    def check(self) -> None:
        if self.mode not in MODES:
            raise LiveError(f"mode {self.mode!r}: use propose or auto")
        if self.period < 60:
            raise LiveError(f"period {self.period:g} s: at least 60 s (Slurm recalculates "
                            "priorities once a minute at most)")
        if self.history <= 0 or self.min_jobs < 1 or self.budget < 1 or self.samples < 1:
            raise LiveError("history, min_jobs, budget and samples must be positive")
        from ..adapt.controller import check_sample_counts
        from ..adapt.sources import check_model_source

        check_model_source(self.samples, self.validation_samples, 0.0)
        check_sample_counts(self.samples, self.validation_samples)
        if not 0 < self.max_step <= 1:
            raise LiveError(f"max_step {self.max_step:g}: must be in (0, 1]")
        if self.connector.get("kind") not in ("slurm", "fake"):
            raise LiveError(f"connector {self.connector.get('kind')!r}: use slurm or fake")
        live_space(self.policy, self.fixed)  # the policy has live knobs; fixed values are valid

    def save(self, state_dir: Path) -> None:
        write_text_atomic(Path(state_dir) / SETTINGS_FILE, json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, state_dir: Path) -> "AgentSettings":
        p = Path(state_dir) / SETTINGS_FILE
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            raise LiveError(f"{p}: no agent here (initialise the state directory first)") from None
        except (OSError, ValueError) as e:
            raise LiveError(f"{p}: cannot read the agent's settings: {e}") from None
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


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


@dataclass(frozen=True)
class AgentStatus:
    """The agent at a glance (``agent status``, the service's page)."""

    running: Revision | None
    pending: Revision | None
    mode: str
    frozen: bool
    frozen_reason: str
    frozen_by: str
    blocked: str
    next_round: float | None  # unix s
    last_round: dict[str, Any] | None
    period: float
    policy: str
    connector: dict[str, Any]
    history: list[Revision]
    interrupted_apply: int | None  # revision of an apply a killed process left open

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "running": self.running.to_dict() if self.running else None,
            "pending": self.pending.to_dict() if self.pending else None,
            "mode": self.mode, "frozen": self.frozen, "frozen_reason": self.frozen_reason,
            "frozen_by": self.frozen_by, "blocked": self.blocked, "next_round": self.next_round,
            "last_round": self.last_round, "period": self.period, "policy": self.policy,
            "connector": self.connector, "history": [r.to_dict() for r in self.history],
            "interrupted_apply": self.interrupted_apply})


class Agent:
    """The live loop's actions on one cluster (see the module doc)."""

    def __init__(self, state_dir: Path | str, settings: AgentSettings,
                 connector: Connector | None = None):
        self.state_dir = Path(state_dir)
        self.settings = settings
        self.store = RevisionStore(self.state_dir)
        self.connector = connector if connector is not None else make_connector(settings.connector)
        self.space: LiveSpace = live_space(settings.policy, settings.fixed)
        self._controller: Any = None  # kept between rounds of `run` (warm starts, drift reference)
        self._trigger = "period"  # of the round in progress, for its record
        self.log: Callable[[str], None] = lambda msg: None

    # -- status ---------------------------------------------------------------------------
    def status(self, history: int = 10) -> AgentStatus:
        f = self.store.flags()
        last = self.store.last_round()
        intent = self.store.open_apply()
        return AgentStatus(
            running=self.store.running(), pending=self.store.pending(), mode=self.settings.mode,
            frozen=f.frozen, frozen_reason=f.frozen_reason, frozen_by=f.frozen_by,
            blocked=f.blocked, next_round=(last[0] + self.settings.period) if last else None,
            last_round=last[1] if last else None, period=self.settings.period,
            policy=self.settings.policy, connector=self.connector.describe(),
            history=self.store.history(history),
            interrupted_apply=intent.rev_id if intent else None)

    # -- operator actions -----------------------------------------------------------------
    def approve(self, rev_id: int, actor: str) -> Revision:
        """Apply proposal `rev_id` now (through the connector; checked, restored on failure)."""
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
        edited = self._hand_edits(running)
        if edited:
            self._refuse_approve(rev_id, f"the live config differs from revision {running.id} "
                                 f"({edited}); adopt or undo that edit first")
        return self._apply(rev, actor, f"approved by {actor}")

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
        return self.store.transition(rev_id, RevisionState.REJECTED, actor=actor,
                                     note=reason or "rejected",
                                     allowed_from=[RevisionState.PROPOSED])

    def rollback(self, rev_id: int | None, actor: str, note: str = "") -> Revision:
        """Make the config of revision `rev_id` (None: the one applied before the running one)
        live again, as a new revision; the running one is marked rolled back. Allowed while
        frozen (it is how an operator gets back to a known state)."""
        self.reconcile()
        running = self._running_or_baseline()
        if rev_id is None:
            earlier = [r for r in self.store.history() if r.id != running.id and
                       r.applied_at() is not None and r.id < running.id]
            if not earlier:
                raise ActionNotAllowed(f"revision {running.id} is the only one ever applied; "
                                       "there is nothing to roll back to")
            target = earlier[0]
        else:
            target = self.store.get(rev_id)
            if target.applied_at() is None and target.trigger != "baseline":
                raise ActionNotAllowed(f"revision {rev_id} was never applied ({target.state.value}); "
                                       "only a config that ran can be rolled back to")
        if target.id == running.id:
            raise ActionNotAllowed(f"revision {rev_id} is already running")
        self.live_values()  # never apply blind: Slurm must answer before anything is written
        if (p := self.store.pending()) is not None:
            self.store.transition(p.id, RevisionState.REJECTED, actor=actor,
                                  note=f"superseded by a rollback to revision {target.id}",
                                  allowed_from=[RevisionState.PROPOSED])
        new = self.store.create(target.config, trigger=f"rollback to {target.id}", actor=actor,
                                note=note or f"rollback to revision {target.id}", parent=running.id,
                                evidence=RollbackEvidence(rollback_of=running.id, to=target.id).to_dict())
        return self._apply(new, actor, note or f"rollback to revision {target.id} by {actor}",
                           also=[(running.id, RevisionState.ROLLED_BACK,
                                  f"rolled back to revision {target.id} (revision {new.id}) by "
                                  f"{actor}{': ' + note if note else ''}")])

    def freeze(self, actor: str, reason: str = "") -> Flags:
        return self.store.freeze(actor, reason)

    def unfreeze(self, actor: str) -> Flags:
        return self.store.unfreeze(actor)

    def adopt(self, actor: str, note: str = "") -> Revision:
        """Record the live settings, as they are now, as the running revision (after a hand edit
        the operator wants to keep); this clears the hand-edit block."""
        self.reconcile()
        live = self.live_config()
        running = self.store.running()
        if running is not None and running.config == live:
            raise ActionNotAllowed(f"the live config already is revision {running.id}'s")
        if (p := self.store.pending()) is not None:
            self.store.transition(p.id, RevisionState.REJECTED, actor=actor,
                                  note="superseded: the live config was adopted",
                                  allowed_from=[RevisionState.PROPOSED])
        rev = self.store.create(live, trigger="adopted", actor=actor, state=RevisionState.APPLIED,
                                note=note or "live settings adopted as they are")
        self.store.set_blocked("", actor)
        return rev

    # -- reading the cluster ----------------------------------------------------------------
    def live_values(self) -> dict[str, str]:
        return self.connector.live_values()

    def live_config(self) -> dict[str, Any]:
        return self.space.from_settings(self.live_values())

    def _running_or_baseline(self) -> Revision:
        run = self.store.running()
        if run is not None:
            return run
        if self.store.history(1):
            raise ActionNotAllowed("no revision is known to be running (the last one was rolled "
                                   "back or failed without a replacement); adopt the live config")
        return self.store.create(self.live_config(), trigger="baseline", actor="agent",
                                 state=RevisionState.APPLIED, note="the config found live")

    def _hand_edits(self, running: Revision, live: Mapping[str, str] | None = None) -> str:
        """"" if the live settings are the running revision's, else which differ."""
        live = dict(live if live is not None else self.live_values())
        want = self.space.to_settings(self.space.full(running.config))
        diffs = [f"{k} is {self.space.effective(k, live)} live, {v} in revision {running.id}"
                 for k, v in want.items() if not same_value(k, self.space.effective(k, live), v)]
        return "; ".join(diffs)

    # -- applying ---------------------------------------------------------------------------
    def _apply(self, rev: Revision, actor: str, note: str,
               also: Sequence[tuple[int, RevisionState, str]] = ()) -> Revision:
        settings = self.space.to_settings(self.space.full(rev.config))
        snap = self.connector.snapshot()
        intent = self.store.begin_apply(rev.id, actor=actor, previous=snap)
        try:
            self.connector.apply(settings, header=f"revision {rev.id} ({rev.trigger})")
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
                             also=also)
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
        self.store.end_apply(intent, state=RevisionState.FAILED, actor="agent:reconcile",
                             note=note)
        return note

    # -- a round --------------------------------------------------------------------------
    def step(self, trigger: str = "period", now: float | None = None) -> dict[str, Any]:
        """One round now; returns (and records) what it found and did."""
        s = self.settings
        self._trigger = trigger
        try:
            self.reconcile()
        except LiveError as e:
            return self._round({"action": "blocked", "why": str(e)})
        now = self.connector.now() if now is None else now
        flags = self.store.flags()
        if flags.frozen:
            return self._round({"action": "frozen", "why": f"frozen by {flags.frozen_by}"
                                f"{': ' + flags.frozen_reason if flags.frozen_reason else ''}"})
        try:
            live = self.live_values()
        except SlurmUnavailable as e:
            why = f"Slurm does not answer: {e}"
            self.store.set_blocked(why)
            return self._round({"action": "blocked", "why": why})
        try:
            running = self._running_or_baseline()
        except ActionNotAllowed as e:
            self.store.set_blocked(str(e))
            return self._round({"action": "blocked", "why": str(e)})
        edited = self._hand_edits(running, live)
        if edited:
            why = (f"hand edit: {edited}; the agent proposes nothing until the edit is adopted "
                   "or undone")
            self.store.set_blocked(why)
            return self._round({"action": "blocked", "why": why})
        try:
            jobs = self.jobs(now)
        except LiveError as e:
            why = f"Slurm does not answer: {e}" if isinstance(e, SlurmUnavailable) else \
                f"cannot read the history: {e}"
            self.store.set_blocked(why)
            return self._round({"action": "blocked", "why": why})
        info = {"history_jobs": int(len(jobs)), "finished": int(jobs.finished.sum()),
                "malformed_rows": jobs.malformed}
        judged = self._judge(running, jobs, now)
        if judged is not None:
            return self._round({**info, **judged})
        applied = running.applied_at()
        if running.trigger not in ("baseline", "adopted") and applied is not None and now - applied < s.period:
            self.store.set_blocked("")
            return self._round({**info, "action": "wait", "why": (
                f"revision {running.id} went live {now - applied:.0f} s ago; at most one change "
                f"per period ({s.period:g} s)")})
        if (p := self.store.pending()) is not None:
            self.store.set_blocked("")
            return self._round({**info, "action": "wait",
                                "why": f"revision {p.id} is proposed and awaits approval"})
        finished = int((jobs.finished & (jobs.end >= now - s.history) & (jobs.end <= now)).sum())
        if finished < s.min_jobs:
            why = (f"too little history: {finished} jobs finished in the last {s.history:g} s, "
                   f"{s.min_jobs} needed to fit a workload model; nothing proposed")
            self.store.set_blocked(why)
            return self._round({**info, "action": "blocked", "why": why})
        self.store.set_blocked("")
        return self._round({**info, **self._tune(running, jobs, now, trigger)})

    def _round(self, summary: dict[str, Any]) -> dict[str, Any]:
        summary = {"trigger": self._trigger, **summary}
        self.store.record_round(summary)
        self.log(f"{summary.get('action')}: {summary.get('why', '')}")
        return summary

    def jobs(self, now: float) -> LiveJobs:
        """The history (cache updated with what sacct has since the last round, incrementally),
        plus the seed file's jobs the cluster no longer reports."""
        cache = self.state_dir / HISTORY_FILE
        old = cache.read_text() if cache.exists() else ""
        fetched = float(json.loads((self.state_dir / "fetched.json").read_text())["until"]) \
            if (self.state_dir / "fetched.json").exists() else None
        since = now - self.settings.history if fetched is None else min(
            fetched - OVERLAP, now - OVERLAP)
        since = max(since, now - self.settings.history - OVERLAP)
        text = prune_sacct(merge_sacct(old, self.connector.sacct_rows(since, now)),
                           now - 2 * self.settings.history)
        try:
            write_text_atomic(cache, text)
            write_text_atomic(self.state_dir / "fetched.json", json.dumps({"until": now}))
        except OSError as e:
            raise LiveError(f"{cache}: cannot write the history cache: {e.strerror}") from None
        jobs = read_jobs(text, source=f"sacct since {since:.0f}")
        if self.settings.seed_history:
            jobs = combine(jobs, read_jobs(seed_jobs(Path(self.settings.seed_history), now),
                                           source=self.settings.seed_history))
        return jobs

    def _judge(self, running: Revision, jobs: LiveJobs, now: float) -> dict[str, Any] | None:
        """One period after a change: record what happened and roll back when it got worse by
        more than the guardrail's margin. None when there is nothing to judge yet."""
        s = self.settings
        applied = running.applied_at()
        if (running.outcome is not None or applied is None or running.parent is None
                or running.trigger in ("baseline", "adopted") or now < applied + s.period):
            return None
        before = period_metrics(jobs, applied - s.period, applied)
        after = period_metrics(jobs, applied, applied + s.period)
        metric = s.metric if s.metric in (after.values or before.values or {s.metric: 0}) else "avg_jct"
        predicted = Evidence.from_dict(running.evidence).predicted_gain

        def record(verdict: str, gain: float | None = None) -> None:
            outcome = Outcome(metric, before.to_dict(), after.to_dict(), predicted, verdict, gain)
            self.store.record_outcome(running.id, outcome.to_dict())

        if before.jobs == 0 or after.jobs == 0 or metric not in after.values:
            record("not judged: no finished jobs in one of the two periods")
            return None
        b, a = before.values[metric], after.values[metric]
        gain = (b - a) / abs(b) if b else 0.0
        if gain < -s.margin and not running.trigger.startswith("rollback"):
            verdict = (f"worse: {metric} {b:.1f} -> {a:.1f} ({gain:+.1%}, margin "
                       f"{s.margin:.1%}); rolled back")
            record(verdict, gain)
            try:
                rev = self.rollback(running.parent, "agent:guard", note=verdict)
            except LiveError as e:
                return {"action": "rollback failed", "why": str(e)}
            return {"action": "rolled back", "revision": rev.id, "why": verdict}
        record(f"kept: {metric} {b:.1f} -> {a:.1f} ({gain:+.1%})", gain)
        return None

    def _tune(self, running: Revision, jobs: LiveJobs, now: float, trigger: str) -> dict[str, Any]:
        from ..adapt.controller import Controller, RoundTuner
        from ..adapt.drift import DriftTest
        from ..adapt.guardrail import Guardrail
        from ..adapt.sources import ModelSource, ReplaySource
        from ..cluster import ClusterSpec
        from ..tune.config import ExecutionConfig, SearchConfig
        from ..tune.objective import Objective

        s = self.settings
        obs, origin = observation(jobs, now, s.history, seed=s.seed, backlog_history=s.backlog_history)
        full = self.space.full(running.config)
        bounds = {k: (float(v[0]), float(v[1])) for k, v in s.bounds.items()}
        from ..export.live import live_subspace

        subspace = live_subspace(s.policy, self.space.fixed, full, bounds,
                                 s.max_step if s.mode == "auto" else None)

        def factory(policy: str, cluster: ClusterSpec, objective: Objective, search: SearchConfig,
                    execution: ExecutionConfig) -> RoundTuner:
            # The tuner searches the live part of the policy's space (fixed knobs pinned, managed
            # ones bounded), built as `autosched run --live-knobs` builds it.
            from dataclasses import replace

            from ..tune.tuner import Tuner

            return Tuner(policy, cluster, objective, replace(search, subspace=subspace), execution)

        source = ReplaySource() if s.model == "replay" else ModelSource(s.model, s.samples,
                                                                           validation_samples=s.validation_samples)
        ctl = self._controller
        if ctl is None or ctl.running != full:
            ctl = Controller(s.policy, self.connector.cluster(), source, period=s.period,
                             budget=s.budget, metric=s.metric,
                             guardrail=Guardrail(k=s.k, min_margin=s.margin),
                             drift=DriftTest() if s.drift else None, recent=s.period,
                             min_gap=s.period, initial_config=full, seed=s.seed,
                             tuner_factory=factory, search=SearchConfig(screening=s.screening))
            self._controller = ctl
        try:
            d = ctl.decide(obs, trigger=trigger)
        except AutoschedError as e:
            return {"action": "none", "why": f"tuning failed: {e}"}
        evidence = Evidence(
            predicted_gain=d.predicted_gain, spread=d.spread, samples=d.samples,
            validation_samples=len(d.validation_seeds), tuning_cost=d.tuning_cost,
            causal_graph=d.causal_graph, screened_knobs=d.screened_knobs, metric=s.metric,
            running_value=d.running_value, candidate_value=d.candidate_value, reason=d.reason,
            tuning_seconds=d.tuning_seconds, history_jobs=d.history_jobs,
            imputed_durations=d.imputed_durations, history_origin=origin, model=s.model).to_dict()
        if not d.deployed or d.candidate is None:
            return {"action": "none", "why": d.reason, "evidence": evidence}
        new = self.space.quantized(d.candidate)
        if new == running.config:
            return {"action": "none", "why": "the winner rounds to the running config in Slurm's units",
                    "evidence": evidence}
        actor = "agent:auto" if s.mode == "auto" else "agent:propose"
        rev = self.store.create(new, trigger=trigger, actor=actor, evidence=evidence,
                                note=d.reason, parent=running.id)
        if s.mode == "propose":
            return {"action": "proposed", "revision": rev.id, "why": d.reason}
        try:
            self._apply(rev, actor, f"applied in auto mode: {d.reason}")
        except LiveError as e:
            return {"action": "apply failed", "revision": rev.id, "why": str(e)}
        return {"action": "applied", "revision": rev.id, "why": d.reason}

    def drifted(self, now: float | None = None) -> str:
        """Why the workload drifted since the last tuning round ("" if it did not, or no round of
        this process tuned yet). Called between rounds by `run`."""
        if self._controller is None:
            return ""
        now = self.connector.now() if now is None else now
        obs, _ = observation(self.jobs(now), now, self.settings.history, seed=self.settings.seed,
                             backlog_history=self.settings.backlog_history)
        rep = self._controller.check_drift(obs)
        return rep.reason if rep is not None and rep.drifted else ""

    def run(self, rounds: int | None = None, poll: float | None = None,
            should_stop: Callable[[], bool] = lambda: False,
            sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.monotonic) -> list[dict[str, Any]]:
        """Rounds every period (and on drift, checked every `poll` s) until `rounds` rounds ran or
        `should_stop()`. When Slurm does not answer, the next round comes after a back-off
        (30 s, doubling, at most a period). Returns the rounds' summaries."""
        period = self.settings.period
        poll = poll if poll is not None else max(30.0, min(period / 4, 600.0))
        first_backoff = min(30.0, period)
        backoff = first_backoff
        done: list[dict[str, Any]] = []
        trigger = "period"
        while not should_stop() and (rounds is None or len(done) < rounds):
            summary = self.step(trigger)
            done.append(summary)
            if rounds is not None and len(done) >= rounds:
                break
            if summary.get("action") == "blocked" and "does not answer" in summary.get("why", ""):
                wait, backoff = backoff, min(backoff * 2, period)
            else:
                wait, backoff = period, first_backoff
            trigger = "period"
            deadline = clock() + wait
            while clock() < deadline and not should_stop():
                sleep(max(0.0, min(poll, deadline - clock())))
                if self.settings.drift and clock() < deadline:
                    try:
                        why = self.drifted()
                    except LiveError:
                        why = ""
                    if why:
                        trigger = f"drift: {why}"
                        break
        return done


def init_agent(state_dir: Path | str, settings: AgentSettings) -> Agent:
    """Create (or re-configure) an agent in `state_dir`: saves the settings, opens the store."""
    settings.check()
    state_dir = Path(state_dir)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        settings.save(state_dir)
    except OSError as e:
        raise LiveError(f"{state_dir}: cannot write the agent's settings: {e.strerror or e}") from None
    return Agent(state_dir, settings)


def open_agent(state_dir: Path | str, connector: Connector | None = None) -> Agent:
    """The agent saved in `state_dir` by init (connector, policy, period, mode)."""
    agent = Agent(state_dir, AgentSettings.load(Path(state_dir)), connector)
    try:
        agent.reconcile()
    except LiveError:
        pass  # recorded as the block reason; status shows it, actions retry it
    return agent

