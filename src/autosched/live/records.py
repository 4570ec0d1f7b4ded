"""What the agent's store holds, as typed records: revisions with their events, evidence,
outcomes and approvals; the agent's flags; apply intents; readings of Slurm and heartbeats; and
the rounds it recorded.

Every record is written from its dataclass and read back through it, the one written-down
contract for its JSON keys: the agent writes them, and the service, the status page and the CLI
read them. A field's name IS its JSON key; renaming one breaks every stored row. Rows written by
any version stay readable: a missing key reads as empty, an unknown one is ignored, a value of
another type than its field's reads as empty. How each field is read is declared with the field
(`stored`), and a round's row has one decoder (`StoredRound.from_row`) beside its one encoder.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from ..atomic import pid_alive
from ..jsonable import jsonable
from .errors import LiveError

if TYPE_CHECKING:
    from ..adapt.controller import Decision
    from .backfill import BackfillStats
    from .twin import ClusterSetup  # (imported where a row holds one: the twin is not light)


class RevisionState(str, Enum):
    """The state of a revision; the values are what JSON and the status page show."""

    PROPOSED = "proposed"
    APPLIED = "applied"
    REJECTED = "rejected"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


class RevisionKind(str, Enum):
    """What made a revision (its `trigger` is a human label only)."""

    BASELINE = "baseline"  # the config the agent found live at its first round
    ADOPTED = "adopted"  # the live config as an operator kept it (after a hand edit)
    PROPOSAL = "proposal"  # a new config: a tuning round's winner, or one written by hand
    ROLLBACK = "rollback"  # an earlier revision's config, made live again




@dataclass(frozen=True)
class Event:
    """One append-only state change of a revision."""

    time: float  # unix seconds
    state: RevisionState
    actor: str  # "operator:alice", "agent:auto", "agent:guard", "service:token", ...
    note: str  # why

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "state": self.state.value, "actor": self.actor, "note": self.note}


# -- what a revision's evidence and outcome hold ----------------------------------------------
# The store keeps both as JSON objects (``revisions.evidence``, ``outcomes.outcome``) and reads
# them back through these dataclasses, the one written-down contract for their keys: the agent
# writes them, and the service, the status page and the CLI read them. A field's name IS its JSON
# key; renaming one breaks every stored revision. Rows written by any version stay readable:
# missing keys read as None, unknown ones are ignored.


def finite(v: Any) -> float | None:
    """A JSON number as a float; None for null, a non-number or a non-finite value."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def integer(v: Any) -> int | None:
    """A JSON integer; None for anything else (``true`` is not 1)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def text_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def text(v: Any) -> str:
    """A JSON value as text; "" for null or a missing key."""
    return str(v or "")


def mapping(v: Any) -> dict[str, Any] | None:
    return v if isinstance(v, dict) else None


def listing(v: Any) -> list[Any] | None:
    return v if isinstance(v, list) else None


Reader = Callable[[Any], Any]


def stored(read: Reader, default: Any = None) -> Any:
    """A field of a stored record and how its JSON value is read back (`read` returns what the
    field holds, or its empty value for a value of another type). Every field of a record that
    `read_record` reads declares one: a field of a new type without a reader fails when its class
    is made (`readable`), not when an old row is read."""
    return field(default=default, metadata={"read": read})


T = TypeVar("T")


def readable(cls: type[T]) -> type[T]:
    """Class decorator: every field of `cls` declares its reader (`stored`)."""
    missing = [f.name for f in fields(cls) if "read" not in f.metadata]  # type: ignore[arg-type]
    if missing:
        raise TypeError(f"{cls.__name__}: field(s) {', '.join(missing)} declare no reader (stored)")
    return cls


def read_record(cls: type[T], d: Mapping[str, Any] | None) -> T:
    """A `readable` record from its stored JSON object: each field by its own reader; a missing
    key reads as the reader's empty value, an unknown key is ignored."""
    d = d if isinstance(d, Mapping) else {}
    return cls(**{f.name: f.metadata["read"](d.get(f.name)) for f in fields(cls)})  # type: ignore[arg-type]


@readable
@dataclass(frozen=True)
class Evidence:
    """Why a revision was made. A tuning round's proposal carries the round's figures (the agent
    writes them when it creates the revision); a rollback says which running revision it replaced
    and which earlier revision's config it brings back; the baseline and an adopted config carry
    none. A gain is relative (0.05 = 5% better), on `metric`."""

    predicted_gain: float | None = stored(finite)  # mean paired gain of the candidate over the running config
    spread: float | None = stored(finite)  # standard error of that mean over the sampled workloads
    samples: int | None = stored(integer)  # workloads the tuner evaluated on
    validation_samples: int | None = stored(integer)  # fresh workloads the guardrail checked on (0: none)
    tuning_cost: dict[str, Any] | None = stored(mapping)  # as the tuner reports it (trials, simulations, ...)
    causal_graph: list[Any] | None = stored(listing)  # [source, target, directed] edges of screening
    screened_knobs: dict[str, Any] | None = stored(mapping)  # knob frozen by screening -> its value
    metric: str | None = stored(text_or_none)  # what the gain is measured on (e.g. "avg_jct")
    running_value: float | None = stored(finite)
    candidate_value: float | None = stored(finite)
    reason: str | None = stored(text_or_none)  # the controller's words for its decision
    tuning_seconds: float | None = stored(finite)
    history_jobs: int | None = stored(integer)  # jobs of the cluster's history the round saw
    imputed_durations: int | None = stored(integer)  # of those, unfinished ones given an imputed duration
    history_origin: float | None = stored(finite)  # unix time the observation's times count from
    # the workload source ("replay" or a model's name, "stat at time scale 120" on a test bed)
    model: str | None = stored(text_or_none)
    # knobs the tuner's winner changed that carried none of its predicted gain, put back to their
    # running values before proposing; and each proposed knob's share of the gain (the gain lost
    # when only it goes back, as a fraction of the predicted gain)
    dropped_knobs: list[Any] | None = stored(listing)
    knob_shares: dict[str, Any] | None = stored(mapping)
    # sdiag's backfill statistics when the round proposed it (`live.backfill.BackfillStats`): what
    # backfill cost before the change
    backfill: dict[str, Any] | None = stored(mapping)
    rollback_of: int | None = stored(integer)  # a rollback: the running revision it replaced
    to: int | None = stored(integer)  # a rollback: the revision whose config it brings back
    # the round's portfolio (`adapt.portfolio`): which candidate led, each candidate's paired
    # gain over the running config with its s.e. and sample count (or why it left the race),
    # the guardrail's k for the number compared, and the leader's effects per account and GPU
    # size class (`adapt.constraints.Effect`) with what broke the operator's policy
    leader: str | None = stored(text_or_none)
    portfolio: list[Any] | None = stored(listing)
    guard_k: float | None = stored(finite)
    effects: list[Any] | None = stored(listing)
    violations: list[Any] | None = stored(listing)
    # how a proposal that auto mode did not apply was held back (the brake, one workload)
    held: str | None = stored(text_or_none)

    def to_dict(self) -> dict[str, Any]:
        """Every field under its own name, None included (the stored JSON has every key)."""
        return asdict(self)

    def portfolio_lines(self) -> list[str]:
        """The portfolio's standings in words, the leader first: "small first: +24.4% ± 3.1% on
        16 samples (the leader)", "GPU first: +0.2% ± 0.1% on 4 samples, cannot reach ..."."""
        rows = [r for r in self.portfolio or [] if isinstance(r, Mapping)]
        rows.sort(key=lambda r: r.get("name") != self.leader)
        out = []
        for r in rows:
            gain, se, n = r.get("gain"), r.get("se"), r.get("samples")
            figure = (f"{gain:+.1%} ± {se:.1%} on {n} samples" if isinstance(gain, (int, float))
                      and isinstance(se, (int, float)) else "not scored")
            why = " (the leader)" if r.get("name") == self.leader else \
                (f", {r['dropped']}" if r.get("dropped") else "")
            out.append(f"{r.get('name')}: {figure}{why}")
        return out

    def effect_lines(self) -> list[str]:
        """The leader's effects per account, GPU-size class and the queue at the round in words:
        "account chemistry: average wait 15 -> 12 min (up to 24)", "size 5-8 GPUs: p95 wait 60
        -> 150 min (up to 70): breaks the policy"."""
        out = []
        for e in self.effects or []:
            if not isinstance(e, Mapping):
                continue
            kind = e.get("kind")
            what = {"account": "average wait", "size": "p95 wait"}.get(str(kind), "total wait")
            name = {"account": f"account {e.get('name')}", "size": f"size {e.get('name')} GPUs"}.get(
                str(kind), f"the queue {e.get('name')}")
            try:
                run, cand, allowed = (float(e[k]) / 60 for k in ("running", "candidate", "allowed"))
            except (KeyError, TypeError, ValueError):
                continue
            broken = "" if e.get("holds", True) else ": breaks the policy"
            out.append(f"{name}: {what} {run:.0f} -> {cand:.0f} min (up to {run + allowed:.0f}){broken}")
        return out

    def predicted_text(self) -> str:
        """The predicted gain as the status and the page word it: "+8.0% ± 2.0%"; "+12.7% (one
        workload: no spread measured)" when one workload was evaluated (its spread of 0 is not a
        measurement); "+8.0%" without a spread; "unknown" without a gain (never "+0.0%")."""
        if self.predicted_gain is None:
            return "unknown"
        if self.samples == 1:
            return f"{self.predicted_gain:+.1%} (one workload: no spread measured)"
        if self.spread is None:
            return f"{self.predicted_gain:+.1%}"
        return f"{self.predicted_gain:+.1%} ± {self.spread:.1%}"

    @classmethod
    def from_decision(cls, d: Decision, *, metric: str, history_origin: float,
                      model: str) -> Evidence:
        """What a revision (or a round that proposed nothing) records of the Controller's
        decision `d`, made on `metric` and on a history whose times count from
        `history_origin`, with workloads from `model`. The one place a decision's figures are
        copied into evidence."""
        return cls(
            predicted_gain=d.predicted_gain, spread=d.spread, samples=d.samples,
            validation_samples=d.guard_samples or len(d.validation_seeds), tuning_cost=d.tuning_cost,
            causal_graph=d.causal_graph, screened_knobs=d.screened_knobs, metric=metric,
            running_value=d.running_value, candidate_value=d.candidate_value, reason=d.reason,
            tuning_seconds=d.tuning_seconds, history_jobs=d.history_jobs,
            imputed_durations=d.imputed_durations, history_origin=history_origin, model=model,
            dropped_knobs=list(d.dropped_knobs), knob_shares=dict(d.knob_shares),
            leader=d.leader or None, portfolio=list(d.portfolio) or None, guard_k=d.guard_k,
            effects=list(d.effects) or None, violations=list(d.violations) or None)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Evidence:
        """Any revision's stored evidence: missing keys are None, unknown keys are ignored, and
        a value of another type than its field's is None (a gain must be a finite number)."""
        return read_record(cls, d)


def gain_text(gain: float | None, sd: float | None, lo: float | None, hi: float | None,
              replays: int | None) -> str:
    """A counterfactual gain as the status words it: "+5.0% ± 2.0% (range +1.0% to +8.0%, 5
    replays)"; "+5.0% (1 replay)"; "+5.0%" when the outcome has no spread (an older one);
    "unknown" when there is no gain (never "+0.0%")."""
    if gain is None:
        return "unknown"
    if replays is None:
        return f"{gain:+.1%}"
    if sd is None or lo is None or hi is None:
        return f"{gain:+.1%} ({replays} replay{'s' if replays != 1 else ''})"
    return f"{gain:+.1%} ± {sd:.1%} (range {lo:+.1%} to {hi:+.1%}, {replays} replays)"


@readable
@dataclass(frozen=True)
class JudgedOutcome:
    """What a revision did over the period after it went live, recorded once by the agent's judge
    (live/round.py) one period on: the period's real jobs, replayed in the agent's twin from the
    backlog at the change under the config before it and under its own (live/judge.py), beside
    what really happened; every figure counts a job that had not finished by the period's end
    with what it had waited and run so far. Gains are relative (0.05 = 5% better), on `metric`.

    An outcome stored by an older version (a before/after comparison: ``before``, ``after``,
    ``observed_gain``) reads with its metric, predicted gain and verdict; its other figures are
    None."""

    metric: str = stored(text, MISSING)  # what was compared (the agent's metric if the judge measures it, else avg_jct)
    predicted_gain: float | None = stored(finite, MISSING)  # copied from the revision's `Evidence`, to set beside it
    # "kept: ...", "worse: ...; rolled back", "twin not trusted: ...; frozen" or "not judged: ..."
    verdict: str = stored(text, MISSING)
    # the change's gain in the twin on the period's real jobs: (old - new) / old of each
    # simulated pair, averaged over the replays (the recorded times' and the jittered copies');
    # None when not judged
    counterfactual_gain: float | None = stored(finite)
    # how far the twin under the new config was from what the cluster did over the period:
    # |simulated - realized| / realized, averaged over the replays
    twin_error: float | None = stored(finite)
    realized: dict[str, Any] | None = stored(mapping)  # the period as it went: `PeriodFigures.to_dict()`
    # replayed on the recorded submit times under the config before the change, and under the
    # revision's config
    simulated_old: dict[str, Any] | None = stored(mapping)
    simulated_new: dict[str, Any] | None = stored(mapping)
    period: dict[str, Any] | None = stored(mapping)  # the judged period: `Counterfactual.period()`
    # the gain's spread over the replays: standard deviation (None with one replay), lowest and
    # highest; how many replays; and the jittered copies' [old, new] figures (live/judge.py).
    # None in an outcome recorded before the judge replayed jittered copies.
    gain_sd: float | None = stored(finite)
    gain_min: float | None = stored(finite)
    gain_max: float | None = stored(finite)
    replays: int | None = stored(integer)
    copies: list[Any] | None = stored(listing)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def counterfactual_text(self) -> str:
        """The counterfactual gain as `gain_text` words it."""
        return gain_text(self.counterfactual_gain, self.gain_sd, self.gain_min, self.gain_max,
                         self.replays)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> JudgedOutcome | None:
        """A revision's stored outcome (None when it has none): missing keys read as None (the
        metric and verdict as ""), unknown keys are ignored, and a value of another type than its
        field's is None."""
        if not d or not isinstance(d, Mapping):
            return None
        return read_record(cls, d)


@dataclass(frozen=True)
class Approval:
    """Who approved a revision, and the include file's diff as the apply wrote it. `confirmed`:
    the approver was shown this diff and sent it back with the approval (the status page, or the
    API's ``include_diff``); a command-line approve records the diff without it."""

    actor: str  # "operator:alice", "service:token", ...
    include_diff: str  # unified diff of the include file, before -> as written
    confirmed: bool
    time: float  # unix s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LiveOverride:
    """A live setting that differed from the running revision's (a hand edit) when an apply
    overwrote it because the operator forced it: the setting, its live text then, and the text
    the running revision holds."""

    setting: str
    live: str | None  # None: Slurm showed no value
    expected: str

    def __str__(self) -> str:
        return f"{self.setting} is {self.live} live, {self.expected} in the running revision"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LiveReading:
    """The managed knobs as the agent last read them from Slurm (`scontrol show config`), by
    knob name as Slurm spells each value, and when (unix s)."""

    time: float
    knobs: dict[str, str]


@dataclass(frozen=True)
class Heartbeat:
    """`agent run`'s sign of life: its process, when it was last seen (unix s), since when it
    runs, and how often it wakes (s): a beat older than a few of those means it is gone."""

    time: float
    pid: int
    host: str
    poll: float
    started: float

    def owner_alive(self) -> bool:
        """Whether the process still runs (on this host; on another one: assumed)."""
        return _pid_alive(self.pid, self.host)


@dataclass(frozen=True)
class Revision:
    """One managed live config, as proposed or applied, with its evidence and its history.

    Every field is a key of its JSON (`to_dict`); the service's response model is made from
    these fields (service/models.py)."""

    id: int
    created: float
    kind: RevisionKind
    config: dict[str, Any]  # the FULL managed live config (Slurm names -> values)
    diff: dict[str, tuple[Any, Any]]  # knob -> (value before, value after), vs `parent`
    parent: int | None  # revision running when this one was made
    trigger: str  # a label for people: "baseline", "period", "drift: ...", "rollback to 3", ...
    evidence: Evidence
    events: tuple[Event, ...]  # oldest first
    outcome: JudgedOutcome | None = None  # one period after applying
    approval: Approval | None = None  # who approved it and the diff written (an approve only)
    # hand-set live values its apply overwrote because the operator forced it (`--force`)
    overridden: tuple[LiveOverride, ...] = ()
    # the config as the Slurm settings the agent writes (`scontrol show config` spelling); the
    # agent's status fills it in, the store does not know the knobs
    slurm: dict[str, str] | None = None
    state: RevisionState = field(init=False)  # the newest event's
    applied_at: float | None = field(init=False)  # when it last went live (None: never)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", self.events[-1].state)
        times = [e.time for e in self.events if e.state is RevisionState.APPLIED]
        object.__setattr__(self, "applied_at", times[-1] if times else None)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "id": self.id, "created": self.created, "kind": self.kind.value,
            "config": self.config, "diff": {k: list(v) for k, v in self.diff.items()},
            "parent": self.parent, "trigger": self.trigger, "evidence": self.evidence.to_dict(),
            "events": [e.to_dict() for e in self.events],
            "outcome": self.outcome.to_dict() if self.outcome else None,
            "approval": self.approval.to_dict() if self.approval else None,
            "overridden": [o.to_dict() for o in self.overridden], "slurm": self.slurm,
            "state": self.state.value, "applied_at": self.applied_at,
        })


@dataclass(frozen=True)
class Flags:
    """The agent's switches: frozen by an operator (kill switch), or blocked by what it saw."""

    frozen: bool = False
    frozen_reason: str = ""
    frozen_by: str = ""
    blocked: str = ""  # "" or why the agent will not propose (hand edit, Slurm down, ...)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ApplyIntent:
    """A write-ahead record: an apply of `rev_id` began; `previous` says what to restore."""

    seq: int
    time: float
    rev_id: int
    pid: int
    host: str
    actor: str
    previous: dict[str, Any] = field(default_factory=dict)

    def owner_alive(self) -> bool:
        """Whether the process that began the apply still runs (on this host)."""
        return _pid_alive(self.pid, self.host)


def _pid_alive(pid: int, host: str) -> bool:
    """Whether process `pid` of `host` runs (another host's: cannot tell, assumed to)."""
    return host != socket.gethostname() or pid_alive(pid)


# -- the rounds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryCounts:
    """The history a round read: the jobs the twin can place (of them, `finished`), and the
    others by reason (`twin.twin_jobs`: a partition or association the cluster does not have,
    more GPUs than a partition has)."""

    jobs: int
    finished: int
    malformed_rows: int  # sacct rows skipped as malformed
    left_out: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundRecord:
    """A round as the status shows it (`AgentStatus.last_round`): when, why, what it did."""

    time: float  # unix s
    trigger: str
    action: str  # an `Action` value
    why: str
    revision: int | None = None
    retry_after: float | None = None
    seconds: float | None = None  # how long it took (None: a round recorded without it)


# keys a round's row has only when the round read what they hold (the store selects by them)
SETUP_KEY, SHADOWED_KEY, BACKFILL_KEY = "setup", "shadowed", "backfill"


@dataclass(frozen=True)
class StoredRound:
    """A round as the store holds it (``rounds.summary``): `to_summary` is what every round
    writes (`round.RoundOutcome.to_summary`), `from_row` reads back any version's row, and the
    status, the view and the controller's memory read rounds only through it. What a round did not
    read is empty (None, or nothing)."""

    time: float  # unix s (the row's own column)
    trigger: str  # "period" or "drift: ..."
    action: str  # an `Action` value ("" in a row without one)
    why: str
    revision: int | None = None
    retry_after: float | None = None  # s until the next round should try (None: a period)
    history: HistoryCounts | None = None
    setup: ClusterSetup | None = None  # the cluster's setup the round read
    setup_error: str = ""  # a recorded setup that cannot be read: why
    setup_changes: tuple[str, ...] = ()  # what changed since the setup a round recorded before
    evidence: Evidence | None = None  # a tuning round's figures when it proposed nothing
    # the include file rewritten for slurm.conf's own entries (None: nothing rewritten, or not
    # checked), and the managed settings slurm.conf sets that it shadows (None: not checked)
    merged: tuple[str, ...] | None = None
    shadowed: tuple[str, ...] | None = None
    backfill: BackfillStats | None = None  # sdiag's backfill statistics the round read
    seconds: float | None = None  # how long the round took

    def brief(self) -> RoundRecord:
        return RoundRecord(self.time, self.trigger, self.action, self.why, self.revision,
                           self.retry_after, self.seconds)

    def to_summary(self) -> dict[str, Any]:
        """The row's JSON object, under the keys rounds have always had (a key only when the
        round has it: an older version reads it as before)."""
        d: dict[str, Any] = {"trigger": self.trigger, "action": self.action, "why": self.why}
        if self.revision is not None:
            d["revision"] = self.revision
        if self.retry_after is not None:
            d["retry_after"] = self.retry_after
        if self.history is not None:
            d.update(history_jobs=self.history.jobs, finished=self.history.finished,
                     malformed_rows=self.history.malformed_rows, left_out=dict(self.history.left_out))
        if self.setup is not None:
            d.update({SETUP_KEY: self.setup.to_dict(), "setup_changes": list(self.setup_changes)})
        if self.evidence is not None:
            d["evidence"] = self.evidence.to_dict()
        if self.merged:
            d["merged"] = list(self.merged)
        if self.shadowed is not None:
            d[SHADOWED_KEY] = list(self.shadowed)
        if self.backfill is not None:
            d[BACKFILL_KEY] = self.backfill.to_dict()
        if self.seconds is not None:
            d["seconds"] = round(self.seconds, 3)
        return d

    @classmethod
    def from_row(cls, time: float, summary: Any) -> StoredRound:
        """Any version's row (`summary`: its JSON, or anything else, read as an empty object)."""
        d: Mapping[str, Any] = summary if isinstance(summary, Mapping) else {}
        from .backfill import BackfillStats

        setup, error = None, ""
        if d.get(SETUP_KEY) is not None:
            from .twin import ClusterSetup

            try:
                setup = ClusterSetup.from_dict(d[SETUP_KEY])
            except LiveError as e:
                error = str(e)
        return cls(time=float(time), trigger=text(d.get("trigger")), action=text(d.get("action")),
                   why=text(d.get("why")), revision=integer(d.get("revision")),
                   retry_after=finite(d.get("retry_after")), history=_history(d), setup=setup,
                   setup_error=error, setup_changes=_texts(d.get("setup_changes")) or (),
                   evidence=Evidence.from_dict(d["evidence"]) if isinstance(d.get("evidence"), Mapping) else None,
                   merged=_texts(d.get("merged")), shadowed=_texts(d.get(SHADOWED_KEY)),
                   backfill=BackfillStats.from_dict(d.get(BACKFILL_KEY)),
                   seconds=finite(d.get("seconds")))


def _history(d: Mapping[str, Any]) -> HistoryCounts | None:
    jobs, finished = integer(d.get("history_jobs")), integer(d.get("finished"))
    if jobs is None or finished is None:
        return None
    left = mapping(d.get("left_out")) or {}
    return HistoryCounts(jobs, finished, integer(d.get("malformed_rows")) or 0,
                         {str(k): v for k, v in left.items() if integer(v) is not None})


def _texts(v: Any) -> tuple[str, ...] | None:
    """A JSON list as a tuple of texts (None: not a list)."""
    return tuple(str(x) for x in v) if isinstance(v, list) else None
