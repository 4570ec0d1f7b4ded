"""The neural workload model (optional extra: skipped without torch)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosched.trace import Trace
from autosched.workload import get_model, load_model

torch = pytest.importorskip("torch")

DAY = 86400.0
SMALL = dict(hidden=8, steps=20, batch=4, chunk=32, duration_buckets=4, warmup=16)


def history(n: int = 300, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    return Trace.from_columns({"job_id": [str(i) for i in range(n)], "submit_time": np.sort(rng.uniform(0, 5 * DAY, n)),
                               "num_gpus": rng.choice([1, 4], n), "duration": rng.lognormal(7, 1, n),
                               "vc": rng.choice(["a", "b", "c"], n)})


def test_neural_is_reproducible_valid_and_round_trips(tmp_path):
    hist = history()
    a = get_model("neural")(**SMALL).fit(hist)
    b = get_model("neural")(**SMALL).fit(hist)
    s1, s2 = a.sample(5 * DAY, DAY, seed=3), b.sample(5 * DAY, DAY, seed=3)
    assert s1.equals(s2) and len(s1) > 0
    assert len(set(s1.job_id.tolist())) == len(s1)
    assert np.all((s1.submit_time >= 5 * DAY) & (s1.submit_time < 6 * DAY))
    assert set(s1.num_gpus.tolist()) <= {1, 4} and set(s1.vc.tolist()) <= {"a", "b", "c"}
    assert np.all(s1.duration > 0)
    a.save(tmp_path / "n.npz")
    assert load_model(tmp_path / "n.npz").sample(5 * DAY, DAY, seed=3).equals(s1)


def test_neural_no_leakage():
    hist = history(seed=1)
    cut = hist.submit_time[200]
    poisoned = hist.replace(num_gpus=np.where(hist.submit_time >= cut, 64, hist.num_gpus))
    a = get_model("neural")(**SMALL).fit(hist.window(-math.inf, cut))
    b = get_model("neural")(**SMALL).fit(poisoned.window(-math.inf, cut))
    assert a.sample(cut, DAY, 0).equals(b.sample(cut, DAY, 0))
