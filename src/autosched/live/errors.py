"""Errors of the live layer; all derive from `autosched.errors.LiveError`."""

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


class Frozen(ActionNotAllowed):
    """The agent is frozen (the store's flag or the stop file): no apply but an operator's
    rollback (the service answers 409)."""


class SlurmUnavailable(LiveError):
    """A Slurm command did not answer (slurmctld or slurmdbd down, or a timeout)."""


__all__ = ["LiveError", "UnknownRevision", "ActionNotAllowed", "IllegalTransition", "Frozen",
           "SlurmUnavailable"]
