"""A sampled job takes the user, account, partition, time limit and CPUs of the history job it
copies (`workload.base.CARRIED`): a Slurm twin's workloads need whose each job is (fair share),
its partition and its time limit (backfill plans with it)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.trace import Trace
from autosched.workload import get_model, load_model

DAY = 86400.0
COPYING = ("replay", "stat", "hybrid")  # the models that copy history jobs


def history(seed: int, n: int = 300, days: float = 3.0, carried: bool = True) -> Trace:
    rng = np.random.default_rng(seed)
    cols = {"job_id": [f"h{i}" for i in range(n)],
            "submit_time": np.sort(rng.uniform(0, days * DAY, n)),
            "num_gpus": rng.choice([1, 2, 4, 8], n),
            "duration": np.round(rng.lognormal(6, 1, n)) + 1,
            "vc": rng.choice(["gpu", "urgent"], n)}
    if carried:
        cols.update(user=rng.choice(["alice", "bob", "carol"], n),
                    account=rng.choice(["physics", "chemistry"], n),
                    time_limit=np.where(rng.random(n) < 0.2, np.nan, rng.choice([300.0, 3600.0], n)),
                    num_cpus=rng.choice([1, 4], n))
        cols["partition"] = cols["vc"]
    return Trace.from_columns(cols)


def rows(tr: Trace, cols: tuple[str, ...]) -> set[tuple]:
    """Each job's values of `cols`, NaN spelt as None (so that equal rows compare equal)."""
    arrays = [getattr(tr, c).tolist() for c in cols]
    return {tuple(None if isinstance(x, float) and x != x else x for x in r) for r in zip(*arrays)}


KEY = ("num_gpus", "duration", "vc", "user", "account", "partition", "time_limit", "num_cpus")


@pytest.mark.parametrize("model", COPYING)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_every_sampled_job_is_a_history_job_with_its_columns(model, seed):
    # Without duration jitter each sampled job equals the history job it copies in every column
    # but its submit time: the set of (GPUs, duration, VC, user, account, partition, limit, CPUs)
    # rows of a sample is a subset of the history's.
    h = history(seed)
    params = {"duration_jitter": 0.0} if model == "stat" else {}
    m = get_model(model)(**params).fit(h, 0.0, 3 * DAY)
    s = m.sample(3 * DAY, DAY, seed=seed)
    assert len(s) > 0
    assert rows(s, KEY) <= rows(h, KEY)  # (a NaN limit, none, is copied as NaN)


@pytest.mark.parametrize("model", COPYING)
def test_saved_models_keep_the_carried_columns(model, tmp_path):
    h = history(1)
    m = get_model(model)().fit(h, 0.0, 3 * DAY)
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    a, b = m.sample(3 * DAY, DAY, seed=4), back.sample(3 * DAY, DAY, seed=4)
    for col in ("user", "account", "partition", "time_limit", "num_cpus"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    assert b.user.dtype == object  # text columns come back as text, as a Trace holds them


@pytest.mark.parametrize("model", COPYING)
def test_a_history_without_the_columns_samples_without_them(model):
    # the bundled Philly sample has only vc: its samples stay as they were, draw for draw
    h = history(2, carried=False)
    s = get_model(model)().fit(h, 0.0, 3 * DAY).sample(3 * DAY, DAY, seed=0)
    assert (s.user, s.account, s.partition, s.time_limit, s.num_cpus) == (None,) * 5


def test_a_hand_made_batch_is_copied_with_its_limits_and_owners():
    # one history batch of two jobs (same VC, 10 s apart): every copy of it keeps each job's
    # owner and limit next to its own size and duration
    h = Trace.from_columns({"job_id": ["a", "b"], "submit_time": [100.0, 110.0], "num_gpus": [1, 8],
                            "duration": [50.0, 500.0], "vc": ["gpu", "gpu"],
                            "user": ["alice", "bob"], "account": ["physics", "chemistry"],
                            "partition": ["gpu", "gpu"], "time_limit": [60.0, np.nan],
                            "num_cpus": [1, 4]})
    s = get_model("stat")(duration_jitter=0.0).fit(h, 0.0, DAY).sample(DAY, DAY, seed=3)
    assert len(s) >= 2
    for g, d, u, a, lim, c in zip(s.num_gpus, s.duration, s.user, s.account, s.time_limit, s.num_cpus):
        assert (g, d, u, a, c) in ((1, 50.0, "alice", "physics", 1), (8, 500.0, "bob", "chemistry", 4))
        assert (lim == 60.0) if g == 1 else np.isnan(lim)
