"""What a failure becomes in a round: one table from exception types to outcomes.

Each part of a round that can fail (`Part`) has its rows, tried in order; the first whose type
the error is an instance of says the round's action and how its why reads. Whether the round is
tried again soon is never a row's choice nor the message's: it is the error class's `temporary`
(`autosched.errors.LiveError`), which an error that wraps a temporary one keeps
(`live.errors.ApplyUnreachable`). A part catches exactly the types its rows name (`caught`), so
an error no row names is a bug and keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..errors import AutoschedError, LiveError
from .errors import ActionNotAllowed, Frozen, RestorePending, SlurmUnavailable
from .round import Action, Block, RoundOutcome


class Part(Enum):
    """The part of a round that failed."""

    READ = "read"  # a read of Slurm or the store (`Observer.observe`), or the reconcile before
    TUNE = "tune"  # the Controller's round on the history
    PROPOSE = "propose"  # recording the winner as a proposal
    APPLY = "apply"  # applying it in auto mode
    ROLLBACK = "rollback"  # the guard's rollback of a change that did worse


@dataclass(frozen=True)
class Row:
    """An error of type `error` in `part` ends the round as `action`; `why` is formatted with
    the error (``{e}``) and the words the part gives (``{what}``: what it could not do,
    ``{revision}``: the revision it acted on)."""

    part: Part
    error: type[AutoschedError]
    action: Action
    why: str


TABLE: tuple[Row, ...] = (
    Row(Part.READ, SlurmUnavailable, Action.BLOCKED, "Slurm does not answer: {e}"),
    Row(Part.READ, RestorePending, Action.BLOCKED, "{e}"),  # says which apply and why
    Row(Part.READ, ActionNotAllowed, Action.BLOCKED, "{e}"),  # no running revision: adopt
    Row(Part.READ, LiveError, Action.BLOCKED, "cannot {what}: {e}"),
    Row(Part.TUNE, SlurmUnavailable, Action.BLOCKED, "Slurm does not answer: {e}"),
    Row(Part.TUNE, AutoschedError, Action.TUNING_FAILED, "tuning failed: {e}"),
    # another process proposed, or another agent's change went live, since the round looked
    Row(Part.PROPOSE, ActionNotAllowed, Action.WAIT, "{e}"),
    # a freeze stored while the round tuned: the apply's own transaction refused it
    Row(Part.APPLY, Frozen, Action.FROZEN, "revision {revision} not applied: {e}"),
    Row(Part.APPLY, ActionNotAllowed, Action.WAIT, "revision {revision} not applied: {e}"),
    Row(Part.APPLY, LiveError, Action.APPLY_FAILED, "{e}"),
    Row(Part.ROLLBACK, Frozen, Action.FROZEN, "rollback not applied: {e}"),
    Row(Part.ROLLBACK, LiveError, Action.ROLLBACK_FAILED, "{e}"),
)


def caught(part: Part) -> tuple[type[AutoschedError], ...]:
    """The error types `part` turns into an outcome (for its ``except`` clause)."""
    return tuple(r.error for r in TABLE if r.part is part)


def temporary(e: BaseException) -> bool:
    """Whether time may end the failure `e` (its class says so: `LiveError.temporary`)."""
    return isinstance(e, LiveError) and e.temporary


@dataclass(frozen=True)
class Failure:
    """What a failed part makes of the round: its action, why, and when to try again (None:
    at the next period)."""

    action: Action
    why: str
    retry_after: float | None

    def outcome(self, revision: int | None = None) -> RoundOutcome:
        return RoundOutcome(self.action, self.why, revision=revision, retry_after=self.retry_after)

    def block(self) -> Block:
        return Block(self.why, self.retry_after)


def failure(part: Part, e: Exception, retry: float, what: str = "",
            revision: int | None = None) -> Failure:
    """The first row of `part` that `e` is an instance of, made a `Failure`; `retry` is the wait
    (`round.next_retry`) when `e` is temporary. An error no row names is raised again."""
    for row in TABLE:
        if row.part is part and isinstance(e, row.error):
            return Failure(row.action, row.why.format(e=e, what=what, revision=revision),
                           retry if temporary(e) else None)
    raise e
