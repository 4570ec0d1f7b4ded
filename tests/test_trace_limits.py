"""Time limits drawn from Tsafrir, Etsion & Feitelson's model (`autosched.trace.limits`) and
`autosched trace limits`: hand-worked values with scripted draws, then properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autosched.cli import app
from autosched.trace import Trace, TraceError, load_trace, write_trace
from autosched.trace.limits import (
    HEAD_SHARE,
    add_time_limits,
    bin_count,
    default_max_limit,
    estimate_histogram,
    head_shares,
    head_values,
    job_counts,
)

H, M, D = 3600, 60, 86400


class Scripted:
    """Draws given in advance (the model's `Draws`)."""

    def __init__(self, order: int, u: list[float], perm: list[int] | None = None):
        self.order, self.u, self.perm = order, u, perm

    def integers(self, high: int) -> int:
        assert 0 <= self.order < high
        return self.order

    def permutation(self, n: int) -> np.ndarray:
        assert self.perm is not None and len(self.perm) == n
        return np.asarray(self.perm)

    def random(self, size: int) -> np.ndarray:
        assert len(self.u) == size
        return np.asarray(self.u)


def test_bin_count_is_the_papers_piecewise_line_rounded_half_up():
    assert bin_count(0) == 0
    assert bin_count(5) == 3  # 10 / 20 * 5 = 2.5 -> 3
    assert bin_count(20) == 10
    assert bin_count(1682) == 39  # 35 + 682 * 55 / 9000 = 39.17
    assert bin_count(250000) == 565 and bin_count(10**6) == 565


def test_head_values_for_two_days_and_for_one_hour():
    # the maximum, the 15 joint values below it, then multiples of 10 h and 5 h counted down
    assert head_values(2 * D) == [2 * D, 5 * M, 10 * M, 15 * M, 20 * M, 30 * M, H, 2 * H, 3 * H, 4 * H, 5 * H,
                                  6 * H, 8 * H, 10 * H, 12 * H, 18 * H, 20 * H, 30 * H, 40 * H, 45 * H]
    # an hour: 5 joint values below it, then 40 min (20-min steps), 50 min (10-min), 55, 45, 35, 25
    assert head_values(H) == [H, 5 * M, 10 * M, 15 * M, 20 * M, 25 * M, 30 * M, 35 * M, 40 * M, 45 * M,
                              50 * M, 55 * M]


def test_head_shares_follow_the_exponential_and_leave_the_rest_to_the_maximum():
    s = head_shares(20)
    assert s[1] == pytest.approx((14.0491 * math.exp(-0.177531 * 2) + 0.462513) / 100)  # 10.31%
    assert sum(s) == pytest.approx(HEAD_SHARE)
    assert s[0] == pytest.approx(0.21733, abs=1e-5) and s[0] == max(s)


def test_job_counts_by_largest_remainder():
    assert job_counts(np.array([0.5, 0.3, 0.2]), 4).tolist() == [2, 1, 1]  # 2, 1.2, 0.8
    assert job_counts(np.array([0.25, 0.25, 0.25, 0.25]), 2).tolist() == [1, 1, 0, 0]  # ties: first


def test_five_jobs_worked_by_hand():
    """Durations 100, 4000, 600, 90000, 30 s. Longest 25 h: the maximum is 2 days. Three bins:
    no tail, so the head's shares are scaled to all jobs; x 5 jobs the ranks 1..6 get 1.221,
    0.579, 0.489, 0.414, 0.351, 0.298: rank 1 one job by its floor, ranks 2-5 the four left by
    remainder. With CTC's order (drawn: 1), ranks 1-5 are 2 d, 15 min, 5 min, 10 min and (time
    rank 13) 10 h. Longest first, each from the estimates left that cover it:
    90000 -> {2 d}; 4000 -> {10 h}; 600 -> {900, 600}, u = 0.9 takes 600; 100 -> {900, 300},
    u = 0 takes 900; 30 -> {300}."""
    tr = Trace.from_columns({"job_id": ["a", "b", "c", "d", "e"], "submit_time": [0, 1, 2, 3, 4],
                             "num_gpus": [1, 1, 1, 1, 1], "duration": [100, 4000, 600, 90000, 30]})
    out, report = add_time_limits(tr, draws=Scripted(1, [0.9, 0.9, 0.9, 0.0, 0.5]))
    assert out.time_limit.tolist() == [900, 36000, 600, 2 * D, 300]
    assert (report.drawn, report.kept, report.max_limit, report.raised) == (5, 0, 2 * D, 0)
    assert out.equals(tr.replace(time_limit=out.time_limit))  # nothing else changed (no VCs)


def test_five_jobs_with_seed_0_worked_by_hand():
    """The same five jobs with `seed=0`: numpy's default_rng(0) draws integers(4) = 3, then
    random(5) = 0.270, 0.041, 0.017, 0.813, 0.913. Order 3 (1, 6, 5, 3, 7, 2, 18, 19, 4, ...)
    ranks 2 d 1st, 30 min 2nd, 15 min 3rd, 3 h 4th (time rank 9), 10 min 5th: the estimates are
    2 d, 3 h, 30 min, 15 min, 10 min. Longest first: 90000 -> {2 d}; 4000 -> {3 h}; 600 ->
    {30, 15, 10 min}, 0.017 x 3 -> the first, 30 min (10 min takes its place); 100 -> {10, 15
    min}, 0.813 x 2 -> the second, 15 min; 30 -> {10 min}. Each limit is a popular round value
    and none is below its run time."""
    tr = Trace.from_columns({"job_id": ["a", "b", "c", "d", "e"], "submit_time": [0, 1, 2, 3, 4],
                             "num_gpus": [1, 1, 1, 1, 1], "duration": [100, 4000, 600, 90000, 30]})
    out, report = add_time_limits(tr, seed=0)
    assert out.time_limit.tolist() == [15 * M, 3 * H, 30 * M, 2 * D, 10 * M]
    assert (report.drawn, report.kept, report.max_limit, report.raised) == (5, 0, 2 * D, 0)


def test_the_maximum_always_takes_popularity_rank_one():
    """SDSC's order ranks the maximum 3rd and 5 min 1st: the two swap."""
    hist = estimate_histogram(5, 2 * D, Scripted(0, []))
    # x 5 jobs: rank 1 (now 2 d) 1 job; ranks 2-5: 3 h (time rank 8, SDSC's 2nd), 5 min (was
    # 1st, now 3rd), 10 min (4th) and 8 h (time rank 12, 5th)
    used = {v: c for v, c in zip(hist.values.tolist(), hist.counts.tolist()) if c}
    assert used == {5 * M: 1, 10 * M: 1, 3 * H: 1, 8 * H: 1, 2 * D: 1}


def test_tail_values_and_the_jobs_on_them():
    """1,000 jobs: 35 bins, the 20 popular values and 15 others that share 11% of the jobs."""
    hist = estimate_histogram(1000, 2 * D, np.random.default_rng(0))
    # 35 bins: 20 head values and 15 tail values, all whole minutes below the maximum
    assert len(hist.values) == 35 and hist.counts.sum() == 1000
    tail = [v for v in hist.values.tolist() if v not in hist.head]
    assert len(tail) == 15 and all(v % 60 == 0 and 0 < v < 2 * D for v in tail)
    assert hist.counts[[v in hist.head for v in hist.values.tolist()]].sum() == pytest.approx(890, abs=20)


def test_limits_already_there_are_kept_and_only_the_others_drawn():
    tr = Trace.from_columns({"job_id": ["a", "b", "c"], "submit_time": [0, 1, 2], "num_gpus": [1, 1, 1],
                             "duration": [100, 200, 300], "time_limit": [3600, math.nan, math.nan]})
    out, report = add_time_limits(tr, seed=1)
    assert out.time_limit[0] == 3600 and np.all(out.time_limit[1:] >= [200, 300])
    assert (report.drawn, report.kept) == (2, 1)


def test_vcs_become_accounts_and_users_when_the_trace_has_none():
    cols = {"job_id": ["a", "b"], "submit_time": [0, 1], "num_gpus": [1, 2], "duration": [10, 20],
            "vc": ["x", "y"]}
    out, _ = add_time_limits(Trace.from_columns(cols))
    assert out.account.tolist() == ["x", "y"] and out.user.tolist() == ["x", "y"]
    out, _ = add_time_limits(Trace.from_columns({**cols, "user": ["u1", "u2"]}))
    assert out.account.tolist() == ["x", "y"] and out.user.tolist() == ["u1", "u2"]
    out, _ = add_time_limits(Trace.from_columns({**cols, "account": ["p", "q"]}))
    assert out.account.tolist() == ["p", "q"] and out.user is None


def test_a_maximum_below_the_longest_job_or_under_an_hour_is_refused():
    tr = Trace.from_columns({"job_id": ["a", "b"], "submit_time": [0, 1], "num_gpus": [1, 1],
                             "duration": [10, 7200]}, source="t.csv")
    with pytest.raises(TraceError, match=r"t.csv: job 'b', column 'duration': the job runs 7200 s, longer "
                                         r"than the maximum time limit 3600 s"):
        add_time_limits(tr, max_limit=3600)
    with pytest.raises(TraceError, match="at least 3600 s"):
        add_time_limits(tr, max_limit=1800)
    assert add_time_limits(tr, max_limit=7190)[1].max_limit == 7200  # rounded up to whole minutes
    with pytest.raises(TraceError, match=r"maximum time limit 1e\+12 s: must be at most 31622400 s \(366 days\)"):
        add_time_limits(tr, max_limit=1e12)
    assert add_time_limits(tr, max_limit=366 * D)[1].max_limit == 366 * D


def test_default_maximum():
    assert default_max_limit(100) == D and default_max_limit(D + 1) == 2 * D
    assert default_max_limit(9 * D) == 14 * D and default_max_limit(53.6 * D) == 60 * D


durations = st.lists(st.floats(min_value=1.0, max_value=20 * D, allow_nan=False), min_size=1, max_size=600)


@settings(max_examples=60, deadline=None)
@given(runtimes=durations, seed=st.integers(0, 2**32 - 1))
def test_a_limit_is_never_below_the_run_time_and_the_same_seed_gives_the_same_limits(runtimes, seed):
    n = len(runtimes)
    tr = Trace.from_columns({"job_id": [str(i) for i in range(n)], "submit_time": list(range(n)),
                             "num_gpus": [1] * n, "duration": runtimes})
    out, report = add_time_limits(tr, seed=seed)
    assert np.all(out.time_limit >= out.duration)
    assert np.all(out.time_limit % 60 == 0) and out.time_limit.max() <= report.max_limit
    again, _ = add_time_limits(tr, seed=seed)
    assert np.array_equal(out.time_limit, again.time_limit)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(400, 3000), seed=st.integers(0, 2**32 - 1), spread=st.floats(1.0, 6.0))
@example(n=400, seed=400, spread=1.5)
def test_popular_values_dominate(n, seed, spread):
    """Run times log-uniform over `spread` decades below a day: at least 89% of jobs minus one
    per head value (rounding) use one of the 20 popular values, and the maximum is the model's
    single most common estimate; it is the most used limit too unless jobs were raised (run
    times crowded near the maximum leave some jobs no estimate, and they take the smallest
    popular value that covers them: seed 400, 1.5 decades, 140 of 400 jobs on 2 h)."""
    rng = np.random.default_rng(seed)
    runtimes = 10 ** rng.uniform(math.log10(D) - spread, math.log10(D), n)
    tr = Trace.from_columns({"job_id": [str(i) for i in range(n)], "submit_time": list(range(n)),
                             "num_gpus": [1] * n, "duration": runtimes})
    out, report = add_time_limits(tr, seed=seed)
    head = set(head_values(int(report.max_limit)))
    on_head = np.isin(out.time_limit, list(head)).sum()
    assert on_head >= HEAD_SHARE * n - 20
    hist = estimate_histogram(n, int(report.max_limit), np.random.default_rng(seed))
    assert hist.values[np.argmax(hist.counts)] == report.max_limit
    values, counts = np.unique(out.time_limit, return_counts=True)
    assert report.raised > 0 or values[np.argmax(counts)] == report.max_limit


def test_different_seeds_give_different_limits():
    tr, _ = load_trace(_philly_like(300))
    a, _ = add_time_limits(tr, seed=0)
    b, _ = add_time_limits(tr, seed=1)
    assert not np.array_equal(a.time_limit, b.time_limit)


def _philly_like(n: int, tmp=None):
    import tempfile
    from pathlib import Path

    rng = np.random.default_rng(7)
    path = Path(tempfile.mkdtemp()) / "t.csv"
    tr = Trace.from_columns({"job_id": [str(i) for i in range(n)], "submit_time": np.arange(n) * 60.0,
                             "num_gpus": rng.choice([1, 2, 4, 8], n), "duration": 10 ** rng.uniform(1, 5, n),
                             "vc": rng.choice(["a", "b", "c"], n)})
    write_trace(tr, path)
    return path


runner = CliRunner()


def test_cli_writes_canonical_csv_with_every_column_and_is_deterministic(tmp_path):
    src = _philly_like(200)
    out1, out2, out3 = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    for out, seed in ((out1, 5), (out2, 5), (out3, 6)):
        result = runner.invoke(app, ["trace", "limits", str(src), "--out", str(out), "--seed", str(seed)])
        assert result.exit_code == 0, result.output
    assert "time limits for 200 jobs (maximum 48 h)" in result.stderr
    assert out1.read_bytes() == out2.read_bytes() and out1.read_bytes() != out3.read_bytes()
    before, _ = load_trace(src)
    after, _ = load_trace(out1)
    assert after.columns().keys() == {*before.columns(), "time_limit", "account", "user"}
    for col in before.columns():
        assert np.array_equal(after.columns()[col], before.columns()[col])
    assert np.all(after.time_limit >= after.duration)


@pytest.mark.parametrize("args, message", [
    (["--out", "{src}"], "is an input of this command; refusing to overwrite it"),
    (["--out", "{tmp}/x.parquet"], "must end in .csv or .csv.gz"),
    (["--out", "{tmp}/x.csv", "--max-limit", "1m"], "must be at least 3600 s"),
    (["--out", "{tmp}/x.csv", "--max-limit", "soon"], "--max-limit 'soon' is not a length of time"),
    (["--out", "{tmp}/x.csv", "--seed", "-1"], "--seed must be in"),
])
def test_cli_refuses_bad_arguments_in_one_line(tmp_path, args, message):
    src = _philly_like(20)
    args = [a.format(src=src, tmp=tmp_path) for a in args]
    result = runner.invoke(app, ["trace", "limits", str(src), *args])
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
