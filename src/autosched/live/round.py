"""One round of the agent, as data: what it observed, what it decides, what came of it.

A round is observe -> decide -> act (`RoundStep.step`):

- ``Observer.observe`` (live/observe.py) does every read (the store, Slurm's live settings, the cluster's setup, the
  history) and turns a failed read into a `Block` that says how soon to try again (`retry_after`);
- `decide` is pure: from the `Observed`, the `RoundRules` and the time it returns a `Plan`
  (`Stop`, `RollBack` or `Tune`), so every rule of a round is tested without a store or a cluster;
- ``RoundStep.act`` (live/step.py) carries the plan out and returns a `RoundOutcome`, which is what the store
  records, what ``agent step`` prints and exits with, and what ``agent run`` waits on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from ..timeparse import format_duration
from .backfill import BackfillStats
from .history import LiveJobs
from .judge import FIGURES, Counterfactual
from .knobs import BACKFILL_PREFIX
from .records import Evidence, Flags, HistoryCounts, JudgedOutcome, Revision, RevisionKind, StoredRound, gain_text
from .twin import ClusterSetup

FIRST_RETRY = 30.0  # s: the first wait after a temporary failure; it doubles, up to a period
# A judged period where fewer than half its jobs had finished says little: censored jobs count
# alike in the cluster and the twin, so both the twin error and the gain are squeezed towards 0
# (an operator's test saw "twin error 0.1%, kept" with every judged job unfinished).
FINISHED_FOR_VERDICT = 0.5

# `agent step`'s exit codes (docs/slurm.md); 2 stays the one-line error of every command
EXIT_OK = 0
EXIT_FROZEN = 3
EXIT_RETRYING = 4  # blocked by something temporary (Slurm does not answer): retried soon
EXIT_BLOCKED = 5  # blocked until an operator acts or more history comes (hand edit, ...)
EXIT_FAILED = 6  # an apply, the guard's rollback or the tuning failed


class Action(str, Enum):
    """What a round did; the value is the ``action`` its stored summary has always had."""

    PROPOSED = "proposed"
    APPLIED = "applied"
    ROLLED_BACK = "rolled back"
    WAIT = "wait"
    NONE = "none"  # tuned, and the winner is not worth a change
    FROZEN = "frozen"
    BLOCKED = "blocked"
    APPLY_FAILED = "apply failed"
    ROLLBACK_FAILED = "rollback failed"
    TUNING_FAILED = "tuning failed"


_FAILED = (Action.APPLY_FAILED, Action.ROLLBACK_FAILED, Action.TUNING_FAILED)


def next_retry(previous: float | None, period: float) -> float:
    """The wait after a temporary failure: `FIRST_RETRY`, then twice the `previous` round's,
    never more than a period."""
    return min(previous * 2 if previous else FIRST_RETRY, period)


# -- what a round observed ------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A read that stopped the round: why, and when to try again (None: at the next period;
    the cause needs an operator or new data, not time)."""

    why: str
    retry_after: float | None = None


@dataclass(frozen=True)
class Observed:
    """Everything a round read, in the order it was read. The reads stop at the first one that
    settles the round: a `Block`, a freeze (a frozen agent does not ask Slurm anything) or a
    hand edit; what was not read is None."""

    now: float  # the cluster's clock
    trigger: str  # "period" or "drift: ..."
    flags: Flags
    previous_retry: float | None = None  # the last round's retry_after (it doubles)
    block: Block | None = None
    running: Revision | None = None
    hand_edits: str = ""  # "" or which live settings differ from the running revision's
    # what the include file was rewritten for (slurm.conf's own entries it carries; None: not
    # checked), and the managed settings slurm.conf sets that the include file shadows
    merged: tuple[str, ...] | None = None
    shadowed: tuple[str, ...] | None = None
    setup: ClusterSetup | None = None  # the cluster's setup (`Connector.setup`), read once a round
    setup_changes: tuple[str, ...] = ()  # what changed since the setup a round recorded last
    jobs: LiveJobs | None = None  # the history's jobs the twin can place (`twin.twin_jobs`)
    left_out: Mapping[str, int] = field(default_factory=dict)  # the others, by reason
    pending: Revision | None = None
    backfill: BackfillStats | None = None  # what backfill costs now (`Connector.backfill_stats`)
    # the judge's replay of the period after the running revision went live, once it is due
    # (`judge_due`); when it is due and could not be made, `unjudged` says why
    counterfactual: Counterfactual | None = None
    unjudged: str = ""


@dataclass(frozen=True)
class RoundRules:
    """The settings a round's rules read (from the agent's settings)."""

    period: float  # s: at most one change per period; a change is judged one period on
    history: float  # s of history a round learns from
    min_jobs: int  # finished jobs in that history below which nothing is proposed
    metric: str
    rollback_margin: float  # a counterfactual loss beyond it rolls a change back
    max_twin_error: float  # a twin error beyond it freezes the agent instead of judging
    # While fewer than `min_finished` of the judged jobs have finished, the judge has no verdict
    # yet and waits, censoring later, up to `verdict_wait` s after the period (None: a period)
    min_finished: float = FINISHED_FOR_VERDICT
    verdict_wait: float | None = None
    # A loss the judge's replays cannot tell from their own spread (within `noise_k` standard
    # errors of 0 over the replays) rolls nothing back: a rollback is a change too, made on
    # evidence as strong as the guardrail asked of the change (its k). 0: any loss beyond the margin.
    noise_k: float = 0.0

    @property
    def longest_wait(self) -> float:
        """How long after the judged period the judge waits for its jobs to finish."""
        return self.period if self.verdict_wait is None else self.verdict_wait

    def censor_time(self, applied: float, now: float) -> float:
        """When a change applied at `applied` is judged at `now`: its figures are censored then,
        at the latest the wait's end."""
        return min(now, applied + self.period + self.longest_wait)


# -- what a round decides -------------------------------------------------------------------


@dataclass(frozen=True)
class Stop:
    """Record the round as `action` and end it."""

    action: Action
    why: str
    retry_after: float | None = None
    blocked: str | None = None  # the agent's block note to set ("" clears it; None keeps it)
    judged: JudgedOutcome | None = None  # the judge's record of the running revision
    freeze: str | None = None  # the agent freezes itself, saying why (None: it does not)


@dataclass(frozen=True)
class RollBack:
    """The running revision did worse than the margin in the counterfactual: the guard returns
    to revision `to`."""

    to: int
    why: str
    judged: JudgedOutcome | None = None


@dataclass(frozen=True)
class Tune:
    """Run a tuning round on `jobs`, simulating the cluster as `setup` describes it, and turn a
    clear winner into a change of `running` (a proposal, or applied in auto mode)."""

    running: Revision
    jobs: LiveJobs
    setup: ClusterSetup
    judged: JudgedOutcome | None = None


Plan = Stop | RollBack | Tune


def decide(obs: Observed, rules: RoundRules, now: float) -> Plan:
    """The round's decision from what it observed (pure; the rules in the order they apply)."""
    if obs.block is not None:
        return Stop(Action.BLOCKED, obs.block.why, obs.block.retry_after, blocked=obs.block.why)
    if obs.flags.frozen:
        f = obs.flags
        return Stop(Action.FROZEN, f"frozen by {f.frozen_by}"
                    f"{': ' + f.frozen_reason if f.frozen_reason else ''}")
    running = obs.running
    if running is None:
        why = "the round found no running revision"
        return Stop(Action.BLOCKED, why, blocked=why)
    if obs.hand_edits:
        why = (f"hand edit: {obs.hand_edits}; the agent proposes nothing until the edit is "
               "adopted or undone")
        return Stop(Action.BLOCKED, why, blocked=why)
    if obs.jobs is None:
        why = "the round read no history"
        return Stop(Action.BLOCKED, why, blocked=why)
    judged = judge(running, obs, rules, now)
    if isinstance(judged, NoVerdictYet):  # the change stands, unjudged, and nothing else moves
        return Stop(Action.WAIT, judged.why, blocked="")
    if judged is not None and not trusted(judged, rules):
        return Stop(Action.FROZEN, judged.verdict, judged=judged, freeze=judged.verdict)
    if (costly := overrun(running, obs.backfill)) is not None and \
            running.kind is not RevisionKind.ROLLBACK:
        # slurmctld cannot afford the change's backfill: back at once, not a period on
        assert running.parent is not None  # (`overrun` needs one)
        return RollBack(running.parent, costly, judged)
    outcome = judged or running.outcome
    if (outcome is not None and rolls_back(outcome, rules) and running.parent is not None
            and running.kind is not RevisionKind.ROLLBACK):
        # a worse change goes back; again at a later round if the rollback failed
        return RollBack(running.parent, outcome.verdict, judged)
    applied = running.applied_at
    if running.kind is not RevisionKind.BASELINE and applied is not None and now - applied < rules.period:
        # an adopted config counts: it changed the live settings as much as an apply does
        return Stop(Action.WAIT, f"revision {running.id} went live {now - applied:.0f} s ago; at "
                    f"most one change per period ({rules.period:g} s)", blocked="", judged=judged)
    if obs.pending is not None:
        return Stop(Action.WAIT, f"revision {obs.pending.id} is proposed and awaits approval",
                    blocked="", judged=judged)
    jobs = obs.jobs
    finished = int((jobs.finished & (jobs.end >= now - rules.history) & (jobs.end <= now)).sum())
    if finished < rules.min_jobs:
        why = (f"too little history: {finished} jobs finished in the last "
               f"{format_duration(rules.history)} ({rules.history:g} s), "
               f"{rules.min_jobs} needed to fit a workload model; nothing proposed")
        return Stop(Action.BLOCKED, why, blocked=why, judged=judged)
    if obs.setup is None:  # (`Observer.observe` reads it before the history)
        why = "the round read no cluster setup to simulate"
        return Stop(Action.BLOCKED, why, blocked=why, judged=judged)
    return Tune(running, jobs, obs.setup, judged)


def judge_due(running: Revision, rules: RoundRules, now: float) -> bool:
    """Whether the running revision is judged now: a change the agent or an operator applied
    (not the baseline, not an adopted config), not judged yet, live for a period."""
    applied = running.applied_at
    return (running.outcome is None and applied is not None and running.parent is not None
            and running.kind not in (RevisionKind.BASELINE, RevisionKind.ADOPTED)
            and now >= applied + rules.period)


def trusted(outcome: JudgedOutcome, rules: RoundRules) -> bool:
    """Whether the twin was close enough to the cluster over the judged period to decide on its
    counterfactual (an outcome without a twin error decides nothing either way)."""
    return outcome.twin_error is None or outcome.twin_error <= rules.max_twin_error


def rolls_back(outcome: JudgedOutcome, rules: RoundRules) -> bool:
    """Whether a judged change made things worse by more than the margin and its replays' noise
    (`worse`), in a twin trusted on the period."""
    gain = outcome.counterfactual_gain
    return gain is not None and worse(gain, outcome.gain_sd, outcome.replays, rules) \
        and outcome.twin_error is not None and trusted(outcome, rules)


def worse(gain: float, sd: float | None, replays: int | None, rules: RoundRules) -> bool:
    """A counterfactual loss beyond the rollback margin and beyond `RoundRules.noise_k` standard
    errors of the mean over the replays (`standard_error`)."""
    return gain < -rules.rollback_margin and gain + rules.noise_k * standard_error(sd, replays) < 0


def standard_error(sd: float | None, replays: int | None) -> float:
    """The standard error of a mean over `replays` replays of spread `sd` (one replay has none)."""
    return (sd or 0.0) / math.sqrt(replays) if replays and replays > 1 else 0.0


@dataclass(frozen=True)
class NoVerdictYet:
    """Most of the judged jobs had not finished when the round replayed the period: the judge
    waits (`RoundRules.verdict_wait`) and records nothing; the round changes nothing either."""

    why: str


def judge(running: Revision, obs: Observed, rules: RoundRules,
          now: float) -> JudgedOutcome | NoVerdictYet | None:
    """The judge's record of the running revision when it is due (`judge_due`; None otherwise),
    from the round's counterfactual (`Observed.counterfactual`): the twin's error on the period
    and the change's counterfactual gain, each a mean over the replays (the gain with its
    spread), and the verdict the round's rules give them. While most judged jobs are unfinished
    at the counterfactual's end (censored), no verdict yet (`NoVerdictYet`), up to the wait's
    end; then an outcome without a gain ("no verdict: ...": no rollback, no freeze)."""
    if not judge_due(running, rules, now):
        return None
    predicted = running.evidence.predicted_gain
    metric = rules.metric if rules.metric in FIGURES else "avg_jct"
    cf = obs.counterfactual
    if cf is None:
        return JudgedOutcome(metric, predicted, f"not judged: {obs.unjudged or 'no replay of the period'}")
    if cf.realized.jobs == 0:
        return JudgedOutcome(metric, predicted, "not judged: no job was queued at the change or "
                             "submitted in the period", period=cf.period())
    real, old, new = (f.value(metric) for f in (cf.realized, cf.old, cf.new))
    # the decision reads means over every replay (the recorded times and the jittered copies):
    # one replay of a busy period can be moved by chaos alone (live/judge.py)
    n = len(cf.replays())
    error, gain = cf.twin_error(metric), cf.gain_mean(metric)
    figures = JudgedOutcome(metric, predicted, f"not judged: the period's realized {metric} is 0",
                            realized=cf.realized.to_dict(), simulated_old=cf.old.to_dict(),
                            simulated_new=cf.new.to_dict(), period=cf.period(), replays=n,
                            copies=[[o.to_dict(), w.to_dict()] for o, w in cf.copies])
    total, done = cf.realized.jobs, cf.realized.finished
    counted = f"judged {total} jobs: {done} finished, {total - done} censored at {_clock(cf.end)}"
    if done < rules.min_finished * total:
        assert running.applied_at is not None  # (judge_due)
        wait_end = running.applied_at + rules.period + rules.longest_wait
        if cf.end < wait_end:
            return NoVerdictYet(f"no verdict yet on revision {running.id}: {counted}; the judge waits "
                                f"for most to finish, until {_clock(wait_end)} at the latest")
        return replace(figures, verdict=f"no verdict: {counted}, after waiting {rules.longest_wait:g} s "
                                        "past the period; the queue outlasts it, the change stands")
    if error is None:
        return figures
    sd, (lo, hi) = cf.gain_sd(metric), cf.gain_range(metric)
    jobs = counted
    if n == 1:
        said = f"{metric} {old:.1f} -> {new:.1f} s in the twin ({gain:+.1%}; {jobs})"
        missed = f"it gave {new:.1f} s where the cluster had {real:.1f} s ({metric}, error {error:.1%}"
        erred = f"twin error {error:.1%}"
    else:
        said = (f"{metric} {old:.1f} -> {new:.1f} s in the twin on the recorded times "
                f"({cf.gains(metric)[0]:+.1%}), {gain_text(gain, sd, lo, hi, n)} with submit "
                f"times jittered ({jobs})")
        missed = (f"it missed the cluster's {real:.1f} s by {error:.1%} on average over {n} "
                  f"replays ({metric}")
        erred = f"twin error {error:.1%} (mean of {n} replays)"
    if error > rules.max_twin_error:
        verdict = (f"twin not trusted: {missed}, over the {rules.max_twin_error:.0%} limit); "
                   f"{said}; frozen instead of deciding")
    elif worse(gain, sd, n, rules) and running.kind is not RevisionKind.ROLLBACK:
        verdict = f"worse: {said}, margin {rules.rollback_margin:.1%}; {erred}; rolled back"
    elif gain < -rules.rollback_margin and running.kind is not RevisionKind.ROLLBACK:
        verdict = (f"kept: a loss within the replays' noise: {said}, {rules.noise_k:g} x s.e. "
                   f"{standard_error(sd, n):.1%}; {erred}")
    else:
        verdict = f"kept: {said}; {erred}"
    return replace(figures, verdict=verdict, counterfactual_gain=gain, twin_error=error,
                   gain_sd=sd, gain_min=lo, gain_max=hi)


def _clock(t: float) -> str:
    """A unix time as the judge's verdicts say it (UTC, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# -- what came of a round -------------------------------------------------------------------


@dataclass(frozen=True)
class RoundOutcome:
    """What a round did (`RoundStep.act`). The store records it as a `StoredRound` (`stored`,
    `to_summary`), under the keys rounds have always had."""

    action: Action
    why: str
    trigger: str = "period"
    revision: int | None = None
    retry_after: float | None = None  # s until the next round should try (None: a period)
    evidence: Evidence | None = None  # a tuning round's figures when it proposed nothing
    history: HistoryCounts | None = None  # None when the round stopped before reading it
    setup: ClusterSetup | None = None  # the cluster's setup (None: not read, as `history`)
    setup_changes: tuple[str, ...] = ()  # what changed since the setup a round recorded last
    merged: tuple[str, ...] | None = None  # as `Observed`'s (None: the round did not check)
    shadowed: tuple[str, ...] | None = None
    backfill: BackfillStats | None = None  # sdiag's backfill statistics the round read
    seconds: float | None = None  # how long the round took

    @property
    def exit_code(self) -> int:
        """``agent step``'s exit code (`EXIT_OK` ... `EXIT_FAILED`)."""
        if self.action is Action.FROZEN:
            return EXIT_FROZEN
        if self.action is Action.BLOCKED:
            return EXIT_RETRYING if self.retry_after is not None else EXIT_BLOCKED
        return EXIT_FAILED if self.action in _FAILED else EXIT_OK

    def stored(self, time: float = 0.0) -> StoredRound:
        """The round as the store holds it, had it been recorded at `time`."""
        return StoredRound(time, self.trigger, self.action.value, self.why, self.revision,
                           self.retry_after, self.history, self.setup, "", self.setup_changes,
                           self.evidence, self.merged, self.shadowed, self.backfill,
                           self.seconds)

    def to_summary(self) -> dict[str, Any]:
        """The store's row of the round (`StoredRound.to_summary`; `StoredRound.from_row` reads
        it back)."""
        return self.stored().to_summary()


def overrun(running: Revision, now_stats: BackfillStats | None) -> str | None:
    """Why `running` is rolled back for what backfill costs now (None: it is not): it changed a
    ``bf_*`` knob, a cycle ran after it went live and took longer than its ``bf_interval``, and
    the cycle recorded before it (its evidence's, if any) fit the interval it ran in."""
    if now_stats is None or running.applied_at is None or running.parent is None:
        return None
    if not any(k.startswith(BACKFILL_PREFIX) for k in running.diff):
        return None
    interval = running.config.get("bf_interval")
    took, at = now_stats.last_cycle, now_stats.last_cycle_at
    if not isinstance(interval, (int, float)) or took is None or at is None \
            or at < running.applied_at or took <= interval:
        return None
    before = BackfillStats.from_dict((running.evidence.backfill or {}))
    old = running.diff.get("bf_interval", (interval, interval))[0]
    if before is not None and before.last_cycle is not None and isinstance(old, (int, float)) \
            and before.last_cycle > old:
        return None  # it did not fit before the change either: not this change's doing
    return (f"a backfill cycle took {took:,.1f} s after revision {running.id} went live, longer "
            f"than its interval (bf_interval={interval:g} s): slurmctld backfills back to back; "
            f"rolled back to revision {running.parent}"
            + (f" (before it: {before.text()})" if before is not None else ""))
