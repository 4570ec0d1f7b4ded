"""Time limits for a trace that has none, drawn from a published model of user runtime estimates.

GPU traces (Philly, ITP) carry no time limits, and Slurm's backfill plans with them. The limits
here follow Tsafrir, Etsion & Feitelson, "Modeling User Runtime Estimates" (JSSPP 2005): users
pick from a few round values, the site's maximum being the most popular, and a limit is never
below the job's run time. The model in four steps (`estimate_histogram`, then `assign_limits`):

1. **How many distinct values** (``bins``): piecewise linear in the number of jobs (`BINS`).
2. **The 20 popular values ("head")**: the maximum, the values common to the four logs the paper
   studied (`JOINT`, 5 min to 18 h) below it, then round multiples (`ROUND_STEPS`) counted down
   from the maximum until there are 20. Their shares: popularity rank x = 2..20 gets
   ``a e^(b x) + c`` percent (`HEAD_SIZE`), the maximum (rank 1) the rest of `HEAD_SHARE` (89%).
   Which value has which rank: one of the four logs' observed orders (`POPULARITY_ORDERS`),
   drawn by the seed, with the maximum always first.
3. **The other values ("tail")**: times ``max * (a-1) x / (a-x)`` at x = i / n (whole minutes,
   `TAIL_TIME`), shares ``a r^b`` for ranks r = 21, 22, ... (`TAIL_SIZE`) scaled to 11%, matched
   to times at random.
4. **Assignment**: shares become job counts (largest remainders), and jobs, longest first, each
   take an estimate drawn uniformly from those still unused that are at least their run time.

Every parameter is the default of the authors' reference implementation of the model
(``est_model.hh`` / ``est_model.cc`` by D. Tsafrir); docs/traces.md says which choices are ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .table import Trace, TraceError

MINUTE, HOUR, DAY = 60, 3600, 86400
HEAD = 20  # the popular values
HEAD_SHARE = 0.89  # of jobs that use one of them
# Percent of jobs at popularity rank x = 2..20: a * exp(b * x) + c.
HEAD_SIZE = (14.0491, -0.177531, 0.462513)
# Percent at rank r >= 21: a * r ** b, scaled so that the tail holds 1 - HEAD_SHARE.
TAIL_SIZE = (795.6, -2.267)
# Tail times: y = (a - 1) x / (a - x) of the maximum, a = 1 + p * bins ** q.
TAIL_TIME = (12.1039, -0.6026)
# (jobs, distinct values): the number of values, linear between these points, flat after the last.
BINS = ((0, 0), (20, 10), (200, 20), (1000, 35), (10000, 90), (70000, 340), (250000, 565))
# The estimates among the top 20 of all four logs (besides the maximum), in seconds.
JOINT = (5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 20 * MINUTE, 30 * MINUTE, HOUR, 2 * HOUR, 3 * HOUR,
         4 * HOUR, 5 * HOUR, 6 * HOUR, 8 * HOUR, 10 * HOUR, 12 * HOUR, 18 * HOUR)
# Round steps that fill the head up to 20 values, each counted down from the maximum.
ROUND_STEPS = (200 * HOUR, 100 * HOUR, 50 * HOUR, 10 * HOUR, 5 * HOUR, 2 * HOUR, HOUR, 20 * MINUTE,
               10 * MINUTE, 5 * MINUTE)
# Popularity rank (1 = most used) of the head values in time order (the maximum first, then the
# others ascending), as observed in the four logs (SDSC SP2, CTC SP2, KTH SP2, SDSC Blue).
POPULARITY_ORDERS = (
    (3, 1, 4, 17, 13, 7, 8, 18, 2, 6, 16, 10, 5, 15, 14, 19, 11, 12, 9, 20),
    (1, 3, 4, 2, 12, 9, 8, 18, 6, 7, 11, 20, 16, 5, 14, 13, 10, 15, 17, 19),
    (1, 4, 10, 14, 20, 2, 3, 7, 12, 6, 19, 5, 18, 16, 9, 17, 15, 13, 8, 11),
    (1, 6, 5, 3, 7, 2, 18, 19, 4, 11, 20, 9, 10, 14, 13, 16, 15, 17, 8, 12),
)
# The default maximum: the first of these at least as long as the trace's longest job (then
# whole multiples of 30 days).
MAX_LIMITS = (DAY, 2 * DAY, 3 * DAY, 7 * DAY, 14 * DAY, 30 * DAY)
MIN_MAX_LIMIT = HOUR  # the model's head needs a maximum of at least an hour
MAX_MAX_LIMIT = 366 * DAY  # as every other length of time given: a value beyond is a typo


class Draws(Protocol):
    """The random draws the model makes (`numpy.random.Generator` is one): tests script them."""

    def integers(self, high: int, /) -> Any: ...  # an integer uniform in [0, high)
    def permutation(self, n: int, /) -> Any: ...  # 0..n-1 shuffled
    def random(self, size: int, /) -> Any: ...  # `size` floats uniform in [0, 1)


@dataclass(frozen=True)
class Histogram:
    """The model's estimates for n jobs: distinct values (s, ascending) and jobs per value."""

    values: np.ndarray  # int64 seconds, ascending
    counts: np.ndarray  # int64, sums to the number of jobs
    head: frozenset[int]  # the popular values

    def estimates(self) -> np.ndarray:
        """One estimate per job, longest first."""
        out: np.ndarray = np.repeat(self.values, self.counts)[::-1]
        return out


@dataclass(frozen=True)
class LimitsReport:
    """What `add_time_limits` did: jobs given a limit, jobs that kept theirs, the maximum, and
    jobs whose drawn histogram had no estimate left at least their run time (they got the
    smallest popular value that is)."""

    drawn: int
    kept: int
    max_limit: float
    raised: int

    def summary(self) -> str:
        kept = f"; {self.kept:,} kept the limit they had" if self.kept else ""
        raised = (f"; {self.raised:,} had no drawn estimate at least their run time and got the next "
                  "popular value" if self.raised else "")
        return (f"time limits for {self.drawn:,} jobs (maximum {self.max_limit / 3600:g} h){kept}{raised}")


def bin_count(jobs: int) -> int:
    """The number of distinct estimate values for `jobs` jobs (`BINS`, rounded half up)."""
    for (x0, y0), (x1, y1) in zip(BINS, BINS[1:]):
        if jobs <= x1:
            return int(math.floor(y0 + (jobs - x0) * (y1 - y0) / (x1 - x0) + 0.5))
    return BINS[-1][1]


def head_values(max_limit: int) -> list[int]:
    """The popular values for a maximum of `max_limit` s: the maximum first, then the others
    ascending (at most `HEAD` in all)."""
    values = [max_limit] + [v for v in JOINT if v < max_limit]
    for step in ROUND_STEPS:
        v = (max_limit // step) * step
        while v > 0 and len(values) < HEAD:
            if v not in values:
                values.append(v)
            v -= step
    return [max_limit] + sorted(values[1:HEAD])


def head_shares(n: int) -> list[float]:
    """Fractions of jobs at popularity ranks 1..n (n <= 20), summing to `HEAD_SHARE`."""
    a, b, c = HEAD_SIZE
    rest = [(a * math.exp(b * x) + c) / 100.0 for x in range(2, n + 1)]
    return [HEAD_SHARE - sum(rest)] + rest


def tail_values(max_limit: int, n: int, bins: int, taken: set[int]) -> list[int]:
    """Up to `n` tail values (s, ascending): ``max * (a-1) x / (a-x)`` at x = i / n, in whole
    minutes; a value already taken moves by a minute or more (+1, -1, +2, -2, +3, -3), and is
    left out if all of those are taken too or outside (0, max)."""
    a = 1.0 + TAIL_TIME[0] * bins ** TAIL_TIME[1]
    out: set[int] = set()
    for i in range(1, n + 1):
        x = i / n
        minute = int(math.floor((a - 1.0) * x / (a - x) * max_limit / MINUTE + 0.5)) * MINUTE
        for shift in (0, 1, -1, 2, -2, 3, -3):
            v = minute + shift * MINUTE
            if 0 < v < max_limit and v not in taken and v not in out:
                out.add(v)
                break
    return sorted(out)


def tail_shares(n: int) -> list[float]:
    """Fractions of jobs at popularity ranks 21..20+n, most popular first, summing to
    1 - `HEAD_SHARE`."""
    a, b = TAIL_SIZE
    raw = [a * (HEAD + 1 + i) ** b for i in range(n)]
    total = sum(raw)
    return [(1.0 - HEAD_SHARE) * r / total for r in raw]


def job_counts(shares: np.ndarray, jobs: int) -> np.ndarray:
    """Shares (summing to 1) as whole job counts summing to `jobs`: each gets the floor of its
    share of the jobs, and the jobs left go one each to the largest remainders (ties: the first)."""
    exact = np.asarray(shares, dtype=float) * jobs
    counts: np.ndarray = np.floor(exact).astype(np.int64)
    left = jobs - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def estimate_histogram(jobs: int, max_limit: int, draws: Draws) -> Histogram:
    """The model's estimates for `jobs` jobs with the site maximum `max_limit` (s). Draws: which
    log's popularity order the head takes (one `integers`), and how tail times meet tail shares
    (one `permutation`)."""
    head = head_values(max_limit)
    order = list(POPULARITY_ORDERS[int(draws.integers(len(POPULARITY_ORDERS)))])
    order[order.index(1)] = order[0]  # the maximum is the most popular: it swaps ranks with rank 1
    order[0] = 1
    # A head shorter than 20 keeps the order's ranks of its values, renumbered 1..n.
    present = order[:len(head)]
    ranks = [sorted(present).index(r) for r in present]
    sizes = head_shares(len(head))
    bins = bin_count(jobs)
    tail = tail_values(max_limit, max(0, bins - len(head)), bins, set(head))
    values = head + tail
    shares = [sizes[r] for r in ranks]
    if tail:
        t = tail_shares(len(tail))
        shares += [t[k] for k in draws.permutation(len(tail))]
    total = sum(shares)  # 1 with a tail; the head alone is scaled up to all jobs
    counts = job_counts(np.asarray(shares) / total, jobs)
    order_by_value = np.argsort(values, kind="stable")
    return Histogram(np.asarray(values, dtype=np.int64)[order_by_value], counts[order_by_value],
                     frozenset(head))


def assign_limits(runtimes: np.ndarray, hist: Histogram, draws: Draws) -> tuple[np.ndarray, int]:
    """Each job's limit: jobs longest first (ties in row order), each takes one of the unused
    estimates that are at least its run time, uniformly (one `random` draw per job). A job for
    which none is left gets the smallest popular value at least its run time (counted: the
    second value returned). The limits are never below the run times."""
    n = len(runtimes)
    estimates = hist.estimates()
    order = np.argsort(-np.asarray(runtimes, dtype=float), kind="stable")
    u = draws.random(n)
    head = np.asarray(sorted(hist.head), dtype=np.int64)
    limits = np.empty(n, dtype=np.float64)
    pool: list[int] = []
    nxt = raised = 0
    for k, j in enumerate(order):
        r = float(runtimes[j])
        while nxt < len(estimates) and estimates[nxt] >= r:
            pool.append(int(estimates[nxt]))
            nxt += 1
        if not pool:
            limits[j] = float(head[np.searchsorted(head, r)])
            raised += 1
            continue
        pick = min(int(u[k] * len(pool)), len(pool) - 1)
        limits[j] = float(pool[pick])
        pool[pick] = pool[-1]
        pool.pop()
    return limits, raised


def default_max_limit(longest: float) -> int:
    """The site maximum when none is given: the first of `MAX_LIMITS` at least `longest`, else
    the next whole multiple of 30 days."""
    for m in MAX_LIMITS:
        if longest <= m:
            return m
    return int(math.ceil(longest / MAX_LIMITS[-1])) * MAX_LIMITS[-1]


def add_time_limits(trace: Trace, seed: int = 0, max_limit: float | None = None,
                    draws: Draws | None = None) -> tuple[Trace, LimitsReport]:
    """`trace` with a time limit for every job that has none (NaN or no `time_limit` column),
    drawn from the model with `seed`; limits it has are kept. `max_limit` is the site's maximum
    (s; default `default_max_limit` of the longest job without a limit). Where the trace has
    VCs and no accounts, each job's account is its VC, and without users its user is the VC too
    (one user per account): what a Slurm replay of the trace submits with. Every other column is
    kept as it is."""
    n = len(trace)
    old = trace.time_limit if trace.time_limit is not None else np.full(n, math.nan)
    missing = np.flatnonzero(np.isnan(old))
    runtimes = trace.duration[missing]
    longest = float(runtimes.max()) if len(missing) else 0.0
    if max_limit is None:
        top = default_max_limit(longest)
    else:
        if not math.isfinite(max_limit) or max_limit < MIN_MAX_LIMIT:
            raise TraceError(f"maximum time limit {max_limit:g} s: must be at least "
                             f"{MIN_MAX_LIMIT} s (the model's popular values need an hour)")
        if max_limit > MAX_MAX_LIMIT:
            raise TraceError(f"maximum time limit {max_limit:g} s: must be at most {MAX_MAX_LIMIT} s "
                             "(366 days); without one, the default fits the longest job")
        top = int(math.ceil(max_limit / MINUTE)) * MINUTE  # Slurm keeps limits in whole minutes
        if longest > top:
            row = int(missing[np.argmax(runtimes)])
            raise TraceError(f"{trace.source or 'trace'}: job {trace.job_id[row]!r}, column 'duration': the job runs "
                             f"{longest:g} s, longer than the maximum time limit {top} s; a limit "
                             "is never below the run time")
    limits = old.copy()
    raised = 0
    if len(missing):
        rng: Draws = draws if draws is not None else np.random.default_rng(seed)
        hist = estimate_histogram(len(missing), top, rng)
        limits[missing], raised = assign_limits(runtimes, hist, rng)
    columns: dict[str, np.ndarray | None] = {"time_limit": limits}
    if trace.vc is not None and trace.account is None:
        columns["account"] = trace.vc
        if trace.user is None:
            columns["user"] = trace.vc
    return (trace.replace(**columns),
            LimitsReport(len(missing), n - len(missing), float(top), raised))
