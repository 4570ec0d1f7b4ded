"""What a round reads before it decides (`Observer.observe` -> `round.Observed`).

The reads run in order, each adding to what was observed, and stop at the first that settles
the round: a freeze (a frozen agent asks Slurm nothing), a hand edit, or a read that failed. A
failed read becomes a `Block` in one place, by the error's type (`live.failures`, part READ):
Slurm not answering and an apply not yet restored are tried again after a back-off, anything
else at the next period. Once the running change is a period old, the judge replays that period
(live/judge.py); a replay that cannot be made is said, not a block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..errors import AutoschedError
from .applying import Applier
from .failures import Part, caught, failure
from .records import Flags
from .round import Observed, RoundRules, judge_due, next_retry
from .stopping import Stopping
from .twin import setup_changes, twin_jobs
from .view import ClusterView

Read = Callable[[Observed], Observed]


class Observer:
    """A round's reads of the cluster and the store (see the module doc)."""

    def __init__(self, view: ClusterView, applier: Applier, stopping: Stopping,
                 rules: Callable[[], RoundRules]):
        self.view, self.applier, self.stopping, self.rules = view, applier, stopping, rules
        self.store = view.store

    def observe(self, trigger: str = "period", now: float | None = None) -> Observed:
        """Every read a round makes, in order, stopping at the first that settles the round (see
        `Observed`); a failed read becomes a `Block`, temporary ones with a back-off."""
        last = self.store.last_round()
        previous = last.retry_after if last else None
        retry = next_retry(previous, self.view.settings.period)
        seen = Observed(now=self.view.connector.now() if now is None else now, trigger=trigger,
                        flags=Flags(), previous_retry=previous)
        for what, read in self.reads():
            try:
                seen = read(seen)
            except caught(Part.READ) as e:  # the one place a failed read becomes a block
                block = failure(Part.READ, e, retry, what=what).block()
                return replace(seen, flags=self.store.flags(), block=block)
            if seen.flags.frozen or seen.hand_edits:
                return seen
        return self._judge(seen)

    def reads(self) -> tuple[tuple[str, Read], ...]:
        """The reads in order, each with what it does in words (for its block's why)."""
        return (("finish an interrupted apply", self._reconcile),
                ("read the live settings", self._live),
                ("bring the include file up to date with slurm.conf", self._include),
                ("read the cluster's setup", self._setup),
                ("read the history", self._history),
                ("read the backfill statistics", self._backfill),
                ("read the revision store", self._pending))

    def _reconcile(self, seen: Observed) -> Observed:
        self.applier.reconcile()  # an apply a killed process left: the cluster may run neither
        return replace(seen, flags=self.store.flags())

    def _live(self, seen: Observed) -> Observed:
        with self.stopping.abandonable():
            live = self.view.live_values()
        running = self.view.running_or_baseline()  # the first round records the baseline
        return replace(seen, running=running, hand_edits=self.view.hand_edits(running, live))

    def _include(self, seen: Observed) -> Observed:
        assert seen.running is not None  # (`_live` read it)
        return replace(seen, merged=tuple(self.view.refresh_include(seen.running)),
                       shadowed=self.view.shadowed(seen.running))

    def _setup(self, seen: Observed) -> Observed:
        with self.stopping.abandonable():
            setup = self.view.connector.setup()
        return replace(seen, setup=setup,
                       setup_changes=tuple(setup_changes(self.view.recorded_setup(), setup)))

    def _history(self, seen: Observed) -> Observed:
        assert seen.setup is not None  # (`_setup` read it)
        with self.stopping.abandonable():
            jobs = self.view.jobs(seen.now)
        kept, left_out = twin_jobs(jobs, seen.setup)
        return replace(seen, jobs=kept, left_out=left_out)

    def _backfill(self, seen: Observed) -> Observed:
        with self.stopping.abandonable():
            return replace(seen, backfill=self.view.connector.backfill_stats())

    def _pending(self, seen: Observed) -> Observed:
        return replace(seen, pending=self.store.pending())

    def _judge(self, seen: Observed) -> Observed:
        """`seen` with the judge's replay of the period after the running revision went live,
        under its parent's config and its own (live/judge.py), once that is due; or, when the
        replay cannot be made, why."""
        from .judge import counterfactual

        running, setup, jobs = seen.running, seen.setup, seen.jobs
        assert running is not None and setup is not None and jobs is not None  # (read above)
        s = self.view.settings
        rules = self.rules()
        if not judge_due(running, rules, seen.now):
            return seen
        assert running.applied_at is not None and running.parent is not None  # (`judge_due`)
        change = running.applied_at
        try:
            space = self.view.twin_space(setup)
            old, new = (space.full(c) for c in (self.store.get(running.parent).config, running.config))
            with self.stopping.abandonable():  # five replays of a period: minutes on a busy cluster
                cf = counterfactual(jobs, setup.cluster_spec(), s.policy, old, new, change,
                                    change + s.period, seen.now, s.seed)
                if cf.realized.finished < rules.min_finished * cf.realized.jobs and seen.now > cf.end:
                    # most judged jobs were unfinished at the period's end: censored later, now
                    # (at the latest when the judge's wait ends), more of them have finished
                    cf = counterfactual(jobs, setup.cluster_spec(), s.policy, old, new, change,
                                        change + s.period, seen.now, s.seed,
                                        censor=rules.censor_time(change, seen.now))
        except AutoschedError as e:
            return replace(seen, unjudged=f"the twin could not replay the period: {e}")
        return replace(seen, counterfactual=cf)
