"""Errors of the live layer; all derive from `autosched.errors.LiveError`.

A class is `temporary` or not (a class-level property of `LiveError`): the agent decides whether
to try again soon by that alone (`live.failures`), so an error that wraps a temporary one keeps
the property by deriving from its class (`ApplyUnreachable`; make it with `apply_failed`).
"""

from __future__ import annotations

from ..errors import LiveError


class UnknownRevision(LiveError, KeyError):
    """No revision with that id in the store (the service answers 404)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown revision"


class ActionNotAllowed(LiveError):
    """The revision's or the agent's state does not allow the action; the message says why
    (the service answers 409)."""


class IllegalTransition(ActionNotAllowed):
    """A move of a revision's state that the store's transition table (`live.store.TRANSITIONS`)
    does not allow; the message names the table's rule (the service answers 409)."""


class UnreadableValue(LiveError):
    """A live setting the agent cannot read as its knob's value (outside the range autosched
    tunes, or not a value of it at all)."""


class Frozen(ActionNotAllowed):
    """The agent is frozen (the store's flag or the stop file): no apply but an operator's
    rollback (the service answers 409)."""


class SlurmUnavailable(LiveError):
    """A Slurm command did not answer (slurmctld or slurmdbd down, or a timeout)."""

    temporary = True


class ApplyFailed(LiveError):
    """An apply did not take effect; the connector has put the previous settings back (the
    message says so, or says what could not be restored)."""


class ApplyUnreachable(ApplyFailed, SlurmUnavailable):
    """An apply that failed because Slurm stopped answering midway: an `ApplyFailed` (what was
    restored is said as there) and, as Slurm not answering is, temporary."""


class RestorePending(LiveError):
    """An apply a killed process left open could not be undone yet (Slurm did not answer the
    restore): the cluster may run neither config until it is, so it is tried again soon."""

    temporary = True


def apply_failed(why: str, *causes: BaseException) -> ApplyFailed:
    """The `ApplyFailed` a connector raises, saying `why`, for an apply that failed on `causes`
    (the apply's error, then the restore's when that failed too): an `ApplyUnreachable` when
    one of them was temporary, so that the caller still knows to try again soon."""
    temporary = any(isinstance(c, LiveError) and c.temporary for c in causes)
    return (ApplyUnreachable if temporary else ApplyFailed)(why)


__all__ = ["LiveError", "UnknownRevision", "ActionNotAllowed", "IllegalTransition", "Frozen",
           "UnreadableValue",
           "SlurmUnavailable", "ApplyFailed", "ApplyUnreachable", "RestorePending", "apply_failed"]
