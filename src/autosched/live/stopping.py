"""Stopping the agent: whether a stop was asked, and the parts of a round a stop may give up.

A round that only reads, judges or tunes writes nothing to Slurm, so a stop asked meanwhile
gives it up at once (`RoundAbandoned`, nothing of it recorded); one that writes to Slurm or the
store (an apply, a restore) ends as it always does, and the loop stops after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class RoundAbandoned(BaseException):
    """A stop was asked (SIGTERM) while the round only read or tuned: it is given up, nothing of
    it recorded. (A BaseException, as KeyboardInterrupt: no handler of errors may catch it.)"""


class Stopping:
    """The agent's stop switch, shared by its loop and its round."""

    def __init__(self) -> None:
        self.requested = False  # `request` was called: no new round begins
        self._abandonable = 0  # > 0 while the round is in a part it may give up

    def request(self) -> None:
        """Stop as soon as it is safe (a SIGTERM handler calls this in the loop's thread): while
        the round reads, judges or tunes, at once (`RoundAbandoned` is raised here); while it
        writes to Slurm or the store (an apply, a restore), after that, which ends as it always
        does (applied, or restored)."""
        self.requested = True
        if self._abandonable:
            raise RoundAbandoned("stop asked while the round read or tuned")

    @contextmanager
    def abandonable(self) -> Iterator[None]:
        """A part of a round that writes nothing to Slurm (a read, the judge's replay, the
        tuning): a stop asked meanwhile gives the round up. Raises at once when a stop was
        already asked."""
        if self.requested:
            raise RoundAbandoned("stop asked")
        self._abandonable += 1
        try:
            yield
        finally:
            self._abandonable -= 1
