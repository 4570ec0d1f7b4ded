"""The agent at a glance: one record, `AgentStatus`, that ``agent status --json`` prints and
``GET /api/status`` returns (the service's response model is made from its fields)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..jsonable import jsonable
from .backfill import BackfillStats
from .records import (
    BACKFILL_KEY,
    SETUP_KEY,
    SHADOWED_KEY,
    Heartbeat,
    LiveReading,
    Revision,
    RoundRecord,
    StoredRound,
    gain_text,
)
from .store import RevisionStore

Mode = Literal["propose", "auto"]
SlurmTexts = Callable[[dict[str, Any]], "dict[str, str] | None"]


@dataclass(frozen=True)
class TwinStatus:
    """The cluster's setup as the newest round that read it found it: when (unix s), what had
    changed since the setup recorded before it, what the twin leaves out of it
    (`ClusterSetup.warnings`), and the history's jobs the twin left out, by reason."""

    read_at: float
    changes: tuple[str, ...]
    warnings: tuple[str, ...]
    left_out: dict[str, int]

    @classmethod
    def of(cls, read: StoredRound) -> TwinStatus:
        """From the newest round that recorded a setup (an unreadable one: a warning)."""
        warnings = tuple(read.setup.warnings()) if read.setup is not None else \
            (f"the recorded setup cannot be read ({read.setup_error})",)
        return cls(read_at=read.time, changes=read.setup_changes, warnings=warnings,
                   left_out=dict(read.history.left_out) if read.history else {})


@dataclass(frozen=True)
class Judgement:
    """The judge's newest record (`JudgedOutcome`) among the revisions a status lists: the
    revision, the gain predicted when it was proposed, its counterfactual gain and the twin's
    error over the period after it went live, each a mean over the judge's replays (None where
    the judge could not measure them), and the verdict; then the gain's spread over the replays
    and how many there were (None in an outcome recorded without them)."""

    revision: int
    predicted_gain: float | None
    counterfactual_gain: float | None
    twin_error: float | None
    verdict: str
    gain_sd: float | None = None
    gain_min: float | None = None
    gain_max: float | None = None
    replays: int | None = None

    @classmethod
    def newest(cls, history: tuple[Revision, ...]) -> Judgement | None:
        """From the newest revision of `history` (newest first) that has an outcome."""
        for r in history:
            if (o := r.outcome) is not None:
                return cls(r.id, o.predicted_gain, o.counterfactual_gain, o.twin_error, o.verdict,
                           o.gain_sd, o.gain_min, o.gain_max, o.replays)
        return None

    def counterfactual_text(self) -> str:
        """The counterfactual gain with its spread (`store.gain_text`)."""
        return gain_text(self.counterfactual_gain, self.gain_sd, self.gain_min, self.gain_max,
                         self.replays)


@dataclass(frozen=True)
class AgentStatus:
    """The running revision, the pending proposal, the newest revisions, whether the agent is
    frozen or blocked and why, its last round and the next, the cluster's setup as the
    newest round read it (`TwinStatus`; None before any round read it), and the judge's newest
    record (`Judgement`). Read from the store; the agent's
    settings (mode, policy, period, connector) are None when the agent cannot be opened, and
    `agent_error` says why."""

    running: Revision | None  # with `slurm` filled in
    pending: Revision | None  # with `slurm` filled in
    history: tuple[Revision, ...]  # the newest revisions, newest first
    revisions: int  # the newest revision's id (0: none yet)
    frozen: bool
    frozen_reason: str
    frozen_by: str
    blocked: str  # why the agent will not propose, or ""
    interrupted_apply: int | None  # revision of an apply a killed process left open
    last_round: RoundRecord | None
    next_round: float | None  # unix s: the last round and its retry_after (else a period)
    mode: Mode | None
    policy: str | None
    period: float | None  # s between rounds
    connector: dict[str, Any] | None  # what the agent talks to (`Connector.describe`)
    agent_error: str = ""  # why the agent could not be opened, or ""
    twin: TwinStatus | None = None
    judged: Judgement | None = None  # the judge's newest record among `history`
    # managed settings slurm.conf sets that the include file shadows, as the newest round that
    # checked found them (`ClusterView.shadowed`)
    shadowed: tuple[str, ...] = ()
    # the managed knobs as the agent last read them from Slurm, and when: the "in Slurm" values
    live: LiveReading | None = None
    heartbeat: Heartbeat | None = None  # `agent run`'s newest (None: no loop ever ran)
    loop_alive: bool = False  # that process runs and beat recently (`LOOP_SILENCE`)
    # what an operator should know of the loop: none alive, a round overdue, Slurm not seen
    warnings: tuple[str, ...] = ()
    # what backfill cost slurmctld as the newest round read it (sdiag; live/backfill.py)
    backfill: BackfillStats | None = None
    # the operator's limits on what a round may propose or apply: `--bound` (knob -> [lo, hi])
    # and, in auto mode, `--max-step` (None when the agent is not open)
    bounds: dict[str, list[float]] | None = None
    max_step: float | None = None
    version: str = field(init=False)  # changes whenever any other field does (the page polls it)

    def __post_init__(self) -> None:
        body = json.dumps(self._fields(), sort_keys=True, default=str)
        object.__setattr__(self, "version", hashlib.sha1(body.encode()).hexdigest()[:16])

    def _fields(self) -> dict[str, Any]:
        return jsonable({
            "running": self.running.to_dict() if self.running else None,
            "pending": self.pending.to_dict() if self.pending else None,
            "history": [r.to_dict() for r in self.history], "revisions": self.revisions,
            "frozen": self.frozen, "frozen_reason": self.frozen_reason,
            "frozen_by": self.frozen_by, "blocked": self.blocked,
            "interrupted_apply": self.interrupted_apply, "last_round": self.last_round,
            "next_round": self.next_round, "mode": self.mode, "policy": self.policy,
            "period": self.period, "connector": self.connector, "agent_error": self.agent_error,
            "twin": self.twin, "judged": self.judged, "shadowed": list(self.shadowed),
            "live": self.live, "heartbeat": self.heartbeat, "loop_alive": self.loop_alive,
            "warnings": list(self.warnings),
            "backfill": self.backfill.to_dict() if self.backfill else None,
            "bounds": self.bounds, "max_step": self.max_step})

    def to_dict(self) -> dict[str, Any]:
        """Every field under its own name."""
        return {**self._fields(), "version": self.version}


# A loop that has not beaten for this many of its polls (plus a minute) is taken for gone; a
# round later than this part of a period (at least a minute) is overdue.
LOOP_SILENCE = 3
OVERDUE = 0.1


def loop_warnings(now: float, beat: Heartbeat | None, alive: bool, next_round: float | None,
                  period: float | None, live: LiveReading | None) -> tuple[str, ...]:
    """What the status warns of the loop (pure): no `agent run` alive, a round overdue, and how
    long ago Slurm was last read."""
    out = []
    if beat is None:
        out.append("no `agent run` has ever run on this state directory: a round happens only "
                   "when `agent step` is run")
    elif not alive:
        out.append(f"no `agent run` is alive: pid {beat.pid} on {beat.host} was last seen "
                   f"{_ago(now - beat.time)} ago")
    if next_round is not None and period is not None \
            and now > next_round + max(60.0, OVERDUE * period):
        out.append(f"a round is overdue: it was due {_ago(now - next_round)} ago")
    if live is None:
        out.append("Slurm's settings have not been read yet")
    elif period is not None and now - live.time > period + max(60.0, OVERDUE * period):
        out.append(f"Slurm's settings were last read {_ago(now - live.time)} ago")
    return tuple(out)


def _ago(s: float) -> str:
    s = max(0.0, s)
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s / n:.1f} {unit}"
    return f"{s:.0f} s"


def read_status(store: RevisionStore, *, history: int = 10, mode: Mode | None = None,
                policy: str | None = None, period: float | None = None,
                connector: dict[str, Any] | None = None, slurm: SlurmTexts | None = None,
                agent_error: str = "", now: float | None = None,
                bounds: dict[str, list[float]] | None = None,
                max_step: float | None = None) -> AgentStatus:
    """The status from `store` and, when the agent is open, its settings; `slurm` spells a
    config as the Slurm settings the agent writes (for the running and pending revisions).
    `now` (default: the clock) judges whether the loop is alive and a round overdue."""
    now = time.time() if now is None else now
    flags = store.flags()
    last_round = store.last_round()
    last = last_round.brief() if last_round else None
    intent = store.open_apply()
    running, pending = store.running(), store.pending()
    if slurm is not None:
        running = replace(running, slurm=slurm(running.config)) if running else None
        pending = replace(pending, slurm=slurm(pending.config)) if pending else None
    wait = last.retry_after if last is not None and last.retry_after is not None else period
    read = store.last_round_with(SETUP_KEY)
    checked = store.last_round_with(SHADOWED_KEY)
    shadowed = checked.shadowed or () if checked else ()
    if checked and running is not None and (running.applied_at or 0) > checked.time:
        shadowed = ()  # said of an older running revision (an approve or adopt since): stale
    live, beat = store.last_reading(), store.heartbeat()
    cost = store.last_round_with(BACKFILL_KEY)
    alive = beat is not None and beat.owner_alive() and \
        now - beat.time <= LOOP_SILENCE * beat.poll + 60.0
    next_round = last.time + wait if last is not None and wait is not None else None
    listed = tuple(store.history(history)) if history > 0 else ()
    return AgentStatus(
        running=running, pending=pending, history=listed,
        revisions=store.newest_id(), frozen=flags.frozen, frozen_reason=flags.frozen_reason,
        frozen_by=flags.frozen_by, blocked=flags.blocked,
        interrupted_apply=intent.rev_id if intent else None, last_round=last,
        next_round=next_round,
        mode=mode, policy=policy, period=period, connector=connector, agent_error=agent_error,
        twin=TwinStatus.of(read) if read else None, judged=Judgement.newest(listed),
        shadowed=shadowed,
        live=live, heartbeat=beat, loop_alive=alive,
        warnings=loop_warnings(now, beat, alive, next_round, period, live),
        backfill=cost.backfill if cost else None,
        bounds=bounds, max_step=max_step)
