"""``agent run``'s loop: a round every period, sooner when the workload drifts or a round said
when to try again, until stopped.

Between rounds the loop beats (the store's heartbeat: the status says whether the loop is alive)
and, every `poll` seconds, looks at Slurm (the age of the last reading; a stale block cleared)
and tests for drift against the reference in the store. A frozen agent asks Slurm nothing. A
stop (`Stopping.request`, or `should_stop`) ends the wait at once and gives up a round that only
reads or tunes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import LiveError
from .activity import Listeners
from .round import RoundOutcome
from .step import RoundStep
from .stopping import RoundAbandoned, Stopping

Clock = Callable[[], float]
Sleep = Callable[[float], object]


class Loop:
    """Runs an agent's rounds (see the module doc)."""

    def __init__(self, rounds: RoundStep, stopping: Stopping, listeners: Listeners):
        self.rounds, self.stopping, self.listeners = rounds, stopping, listeners
        self.view, self.tuning = rounds.view, rounds.tuning
        self.store, self.settings = rounds.store, rounds.settings

    def run(self, rounds: int | None = None, poll: float | None = None,
            should_stop: Callable[[], bool] = lambda: False, sleep: Sleep = time.sleep,
            clock: Clock = time.monotonic) -> list[RoundOutcome]:
        """Rounds every period (and on drift, checked every `poll` s) until `rounds` rounds ran or
        `should_stop()` (or a stop is requested: a round that only reads or tunes then is given
        up). After a round that says when to try again (`retry_after`: Slurm did not answer), the
        next comes then. Returns the rounds' outcomes."""
        try:
            return self._run(rounds, poll, should_stop, sleep, clock)
        except RoundAbandoned as e:
            self.listeners.say(f"stopped: {e}; the round is given up, nothing of it recorded")
            return []

    def _run(self, rounds: int | None, poll: float | None, should_stop: Callable[[], bool],
             sleep: Sleep, clock: Clock) -> list[RoundOutcome]:
        period = self.settings.period
        poll = poll if poll is not None else max(30.0, min(period / 4, 600.0))
        done: list[RoundOutcome] = []
        trigger = "period"
        started = time.time()

        def stopped() -> bool:
            return should_stop() or self.stopping.requested

        while not stopped() and (rounds is None or len(done) < rounds):
            self.store.beat(poll, started)
            out = self.rounds.step(trigger)
            done.append(out)
            if rounds is not None and len(done) >= rounds:
                break
            wait = out.retry_after if out.retry_after is not None else period
            trigger = self._wait(clock() + wait, poll, started, stopped, sleep, clock)
        return done

    def _wait(self, deadline: float, poll: float, started: float, stopped: Callable[[], bool],
              sleep: Sleep, clock: Clock) -> str:
        """Wait until `deadline`, beating and polling; returns the next round's trigger: "drift:
        ..." when the workload drifted meanwhile (the round starts at once), else "period"."""
        while clock() < deadline and not stopped():
            sleep(max(0.0, min(poll, deadline - clock())))
            if stopped():
                break
            self.store.beat(poll, started)
            if clock() >= deadline or self.store.flags().frozen:
                continue  # the round reads Slurm now; a frozen agent asks it nothing
            try:  # a look at Slurm: the age of the last observation, a stale block cleared
                with self.stopping.abandonable():
                    self.view.live_values()
            except LiveError:
                pass  # the next round reads again, and says what it found
            if self.settings.drift and clock() < deadline and not self.stopping.requested:
                try:
                    with self.stopping.abandonable():
                        why = self.tuning.drifted()
                except LiveError:
                    why = ""
                if why:
                    return f"drift: {why}"
        return "period"
