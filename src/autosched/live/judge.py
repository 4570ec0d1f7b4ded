"""The judge's counterfactual: one period after a change, what the period's real jobs would have
done under the old config and under the new one, in the agent's twin, beside what they did.

A period is judged on the same real jobs as they went and as the twin replays them under each
config (on the recorded times and on jittered copies, below), each figure censored at the judging time
(`Counterfactual.end`, one period after the change): a job that has not finished by then counts
with what it has waited and run so far, never dropped, in the realized figures and in the
simulated ones alike.

**Which jobs are judged**: the backlog's queued jobs at the change (submitted before it, not yet
started) and every job submitted in the period. Each one's JCT counts from its real submission.
Jobs running at the change are simulated (they hold their GPUs) but not judged: no config
changes them.

**How the period is replayed** (`replay_trace`), from the backlog at the change:

- a job running at the change is submitted at its real start: before the change it is alone on
  the cluster (jobs that ended before the change are left out), so it starts then (at the
  scheduler's next pass) and runs its real run time, through the period as it did. Which nodes
  it takes is the simulator's placement, not Slurm's; jobs that Slurm ran side by side on
  fragmented nodes may not all fit at once in the simulator, and then one waits;
- a job queued at the change is submitted at the change, with its age (Slurm's age factor and
  the submission order count from its real submission);
- a job submitted in the period is submitted when it really was.

**Jittered copies**: one replay of a busy period is chaotic. Moving every job's submit time
later by under half a second, below what sacct records (whole seconds), can move the twin's
gain of a change from +39% to anywhere between -75% and +17% (docs/closed-loop.md, "How far a
replay can part"). So the period is replayed `JITTERS` more times, each copy with every replayed
job's arrival moved later by U(0, `JITTER`) s (`arrival_jitter`, seeded by the agent's seed),
its submission with it (its age at arrival is the recorded one), the same copy under both
configs; the judge reads the gain over all the replays (the recorded times' and the copies'):
its mean and its spread. A job's figures still count from its recorded submission, as the
realized ones do (sacct's whole second, up to a second before the real one), so a copy's waits
include its jitter (under `JITTER` s a job). `jitters=0` replays the recorded times alone.

A job that has finished by the time of the round (`now`, at or after the judging time) runs its
real run time; one that has not runs a duration drawn from the history given what it has run so
far (`durations_at`, the agent's own rule, seeded by the round's time), the same draw under both
configs. What the cluster's setup gives the twin (nodes, partitions, associations, billing,
flags) is `ClusterSetup.cluster_spec`; the Slurm controller's clocks are the simulator's defaults.

Pure computation: no store, no cluster. The round's rules (live/round.py) turn a
`Counterfactual` into the judge's figures and decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..cluster import ClusterSpec
from ..policies import get_policy
from ..sim.engine import Simulator
from ..trace.table import Trace
from .history import LiveJobs, durations_at, job_trace

# the objectives a period is judged on (censored); another metric of the agent is judged on avg_jct
FIGURES = ("avg_jct", "avg_queue")
DAY = 86400.0
JITTER = 0.5  # s: at most half of sacct's one-second resolution, a difference no one controls
# jittered copies replayed beside the recorded times: each one is a full replay under both
# configs, so the judge's cost is 1 + JITTERS replays; with 5 in all, a gain's mean and spread
# separate a change's effect from the chaos of a busy period (docs/closed-loop.md), at a cost a
# round can pay once a period
JITTERS = 4


@dataclass(frozen=True)
class PeriodFigures:
    """One account of the judged jobs over the period (real or simulated), censored at its end:
    how many there were, how many had finished, and their average JCT and queueing delay (s),
    each counted to the end of the period for a job that had not finished (or started) by then."""

    jobs: int
    finished: int
    avg_jct: float
    avg_queue: float

    def value(self, metric: str) -> float:
        return self.avg_jct if metric == "avg_jct" else self.avg_queue

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def censored_figures(submit: np.ndarray, start: np.ndarray, end: np.ndarray,
                     until: float) -> PeriodFigures:
    """`PeriodFigures` of jobs submitted at `submit`, started at `start` and ended at `end` (NaN:
    not yet), censored at `until`: a start or end after `until`, or none, counts as `until`."""
    n = len(submit)
    if n == 0:
        return PeriodFigures(0, 0, math.nan, math.nan)
    done = ~np.isnan(end) & (end <= until)
    ended = np.where(done, end, until)
    started = np.where(~np.isnan(start) & (start <= until), start, until)
    return PeriodFigures(n, int(done.sum()), float(np.mean(ended - submit)),
                         float(np.mean(np.minimum(started, ended) - submit)))


@dataclass(frozen=True)
class Counterfactual:
    """The period from `start` (the change, unix s) to `end` (the judging time): its judged jobs
    as they really went (`realized`) and as the twin replays them under the old config and the
    new one, and the backlog the replay started from."""

    start: float
    end: float
    realized: PeriodFigures
    old: PeriodFigures
    new: PeriodFigures
    running_at_change: int  # jobs running at the change (simulated, not judged)
    queued_at_change: int  # of the judged jobs, those queued at the change
    imputed: int  # replayed jobs that had not finished by the round: their durations were drawn
    # the jittered copies' (old, new) figures, in copy order (empty: the recorded times only)
    copies: tuple[tuple[PeriodFigures, PeriodFigures], ...] = ()

    def replays(self) -> tuple[tuple[PeriodFigures, PeriodFigures], ...]:
        """Every replay's (old, new) figures: the recorded times', then the copies'."""
        return ((self.old, self.new), *self.copies)

    def gains(self, metric: str) -> np.ndarray:
        """The change's gain on `metric` in each replay, (old - new) / old (0 where old is 0)."""
        return np.array([gain(o.value(metric), n.value(metric)) for o, n in self.replays()])

    def gain_mean(self, metric: str) -> float:
        return float(np.mean(self.gains(metric)))

    def gain_sd(self, metric: str) -> float | None:
        """The gains' standard deviation over the replays (ddof 1); None with one replay."""
        g = self.gains(metric)
        return float(np.std(g, ddof=1)) if len(g) > 1 else None

    def gain_range(self, metric: str) -> tuple[float, float]:
        g = self.gains(metric)
        return float(g.min()), float(g.max())

    def twin_error(self, metric: str) -> float | None:
        """The twin's mean error over the replays under the new config against the realized
        figure, |simulated - realized| / realized; None when the realized figure is 0."""
        real = self.realized.value(metric)
        if not real > 0:
            return None
        return float(np.mean([abs(n.value(metric) - real) / real for _, n in self.replays()]))

    def period(self) -> dict[str, Any]:
        """What the judged period was, as the outcome records it."""
        return {"start": self.start, "end": self.end, "running_at_change": self.running_at_change,
                "queued_at_change": self.queued_at_change, "imputed": self.imputed}


def gain(old: float, new: float) -> float:
    """A change's relative gain, (old - new) / old (0.05 = 5% better); 0 when `old` is 0."""
    return (old - new) / old if old > 0 else 0.0


def arrival_jitter(seed: int, copy: int, n: int) -> np.ndarray:
    """How much later each of a replay's `n` jobs (in the order of `period_rows`) arrives in
    jittered copy `copy` (1, 2, ...): U(0, `JITTER`) s each, the same for a seed and a copy."""
    return np.random.default_rng([seed, copy]).uniform(0.0, JITTER, n)


@dataclass(frozen=True)
class Replay:
    """A period's jobs as the simulator replays them (`trace`, times from `origin`), and for each
    of its rows whether it is judged and its real submission (unix s)."""

    trace: Trace
    origin: float
    judged: np.ndarray  # bool per trace row
    submit: np.ndarray  # real submission, unix s, per trace row
    running_at_change: int
    imputed: int


def period_rows(jobs: LiveJobs, change: float, until: float,
                censor: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Which jobs of `jobs` the period [`change`, `until`) replays (bool masks): those running at
    the change, and those it judges (queued at the change, or submitted in the period). With a
    `censor` time after `until`, the jobs submitted in [`until`, `censor`) are replayed too (they
    compete with the judged ones until then), not judged: in neither mask."""
    started = ~np.isnan(jobs.start) & (jobs.start < change)
    ended = ~np.isnan(jobs.end) & (jobs.end <= change)
    before = jobs.submit < change
    running = before & started & ~ended
    judged = (before & ~started & ~ended) | ((jobs.submit >= change) & (jobs.submit < until))
    return running, judged


def replay_trace(jobs: LiveJobs, change: float, until: float, now: float, seed: int = 0,
                 copy: int = 0, censor: float | None = None) -> Replay:
    """The jobs of the period [`change`, `until`) to replay from the backlog at `change` (see
    the module doc), with their durations as known at `now` (>= `until`): on their recorded
    times (`copy` 0), or on jittered copy `copy` (`arrival_jitter`). With a later `censor`
    time, the jobs submitted up to it come too, not judged."""
    running, judged = period_rows(jobs, change, until)
    later = np.zeros(len(jobs.submit), dtype=bool) if censor is None else \
        (jobs.submit >= until) & (jobs.submit < censor)
    idx = np.flatnonzero(running | judged | later)
    total = durations_at(jobs, now, seed)
    # when each job arrives in the replay, and how long before that it was really submitted (a
    # copy moves the submission as much as the arrival: the age at arrival stays as recorded)
    arrive = np.where(running[idx], jobs.start[idx], np.maximum(jobs.submit[idx], change))
    age = arrive - jobs.submit[idx]
    if copy:
        arrive = arrive + arrival_jitter(seed, copy, len(idx))
    # the trace's rows in its own order (by arrival, then real submission), so that the columns
    # given beside it (the age) and the masks read back are row for row
    by = np.lexsort((jobs.submit[idx], arrive))
    idx, arrive, age = idx[by], arrive[by], age[by]
    origin = math.floor(float(arrive.min(initial=change)) / DAY) * DAY
    trace = job_trace(jobs, idx, arrive - origin, np.maximum(total[idx], 1.0), jobs.time_limit[idx])
    trace = trace.replace(age=age)
    r = running[idx]
    return Replay(trace, origin, judged[idx], jobs.submit[idx], int(r.sum()), int((~jobs.finished[idx]).sum()))


def simulate_period(replay: Replay, cluster: ClusterSpec, policy: str, config: Mapping[str, Any],
                    until: float) -> PeriodFigures:
    """The judged jobs' figures when `replay` runs under `policy` with `config` up to `until`
    (unix s), censored there."""
    sim = Simulator(replay.trace, cluster, get_policy(policy)(config)).run(until=until - replay.origin)
    rec = sim.records()
    j = replay.judged
    return censored_figures(replay.submit[j], rec.first_start[j] + replay.origin,
                            rec.end[j] + replay.origin, until)


def counterfactual(jobs: LiveJobs, cluster: ClusterSpec, policy: str, old: Mapping[str, Any],
                   new: Mapping[str, Any], change: float, until: float, now: float,
                   seed: int = 0, jitters: int = JITTERS, censor: float | None = None) -> Counterfactual:
    """The period [`change`, `until`) of `jobs` (the history at `now`, which is at or after
    `until`): the judged jobs' real figures and their replays under the `old` and the `new`
    config (whole configs of `policy`) on `cluster`, all censored at `censor` (default `until`;
    later: the judge waited for more of them to finish, `Counterfactual.end`), on the recorded
    times and on `jitters` jittered copies (seeded by `seed`)."""
    end = until if censor is None else max(censor, until)

    def pair(copy: int) -> tuple[Replay, PeriodFigures, PeriodFigures]:
        replay = replay_trace(jobs, change, until, now, seed, copy, end)
        return (replay, simulate_period(replay, cluster, policy, old, end),
                simulate_period(replay, cluster, policy, new, end))

    replay, f_old, f_new = pair(0)
    copies = tuple(pair(k)[1:] for k in range(1, jitters + 1))
    _, m = period_rows(jobs, change, until)
    realized = censored_figures(jobs.submit[m], jobs.start[m], jobs.end[m], end)
    return Counterfactual(change, end, realized, f_old, f_new, replay.running_at_change,
                          int((m & (jobs.submit < change)).sum()), replay.imputed, copies)
