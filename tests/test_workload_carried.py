"""A sampled job takes the user, account, partition, time limit and CPUs of the history job it
copies (`workload.base.CARRIED`): a Slurm twin's workloads need whose each job is (fair share),
its partition and its time limit (backfill plans with it)."""

from __future__ import annotations

import json

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


# -- model files: the carried arrays are checked at load ---------------------------------------

def _rewrite(path, dst, header=None, **arrays):
    """`path`'s model file with `arrays` replaced (None: removed) and its header edited by `header`."""
    with np.load(path, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    head = json.loads(str(out.pop("__header__")))
    if header is not None:
        header(head)
    for k, v in arrays.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    with open(dst, "wb") as f:
        np.savez_compressed(f, __header__=np.array(json.dumps(head)), **out)
    return dst


@pytest.mark.parametrize("model", COPYING)
def test_a_model_saved_before_the_carried_columns_loads_and_samples_as_before(model, tmp_path):
    # what the code before them wrote: no "carried" in the header, no carried.* or src arrays
    m = get_model(model)().fit(history(2, carried=False), 0.0, 3 * DAY)
    m.save(tmp_path / "m.npz")
    old = _rewrite(tmp_path / "m.npz", tmp_path / "old.npz", header=lambda h: h.pop("carried"), src=None)
    back = load_model(old)
    assert back.carried == {} and back.sample(3 * DAY, DAY, seed=1).equals(m.sample(3 * DAY, DAY, seed=1))


def _header_carried(value):
    return lambda h: h.__setitem__("carried", value)


N = 300  # jobs of `history`


@pytest.mark.parametrize("model", COPYING)
@pytest.mark.parametrize("edit, message", [
    (dict(**{"carried.time_limit": np.full(N, -5.0)}),
     "array 'carried.time_limit' holds -5 at index 0; time limits (s) are finite numbers in (0, 3,153,600,000], or NaN (none)"),
    (dict(**{"carried.time_limit": np.full(N, np.inf)}),
     "array 'carried.time_limit' holds inf at index 0; time limits (s) are finite numbers in (0, 3,153,600,000], or NaN (none)"),
    (dict(**{"carried.num_cpus": np.full(N, 1.5)}),
     "array 'carried.num_cpus' holds 1.5 at index 0; CPU counts are whole numbers in [0, 100,000,000]"),
    (dict(**{"carried.user": np.zeros(N)}), "array 'carried.user' holds float64 values, not text"),
    (dict(**{"carried.account": np.array(["physics"] * (N - 1))}), f"array 'carried.account' has {N - 1} values, not {N}"),
    (dict(**{"carried.partition": np.array([["gpu"]] * N)}), "array 'carried.partition' has 2 dimension(s), not 1"),
    (dict(header=_header_carried(["user", "qos"])),
     "the carried columns ['user', 'qos'] are not distinct names among user, account, partition, time_limit, num_cpus"),
    (dict(header=_header_carried(["user", "user"])),
     "the carried columns ['user', 'user'] are not distinct names among user, account, partition, time_limit, num_cpus"),
    (dict(header=_header_carried("user")),
     "the carried columns 'user' are not distinct names among user, account, partition, time_limit, num_cpus"),
    (dict(**{"carried.user": None}), "damaged model file (KeyError: 'carried.user')"),
])
def test_a_model_file_with_bad_carried_arrays_is_refused_in_one_line(model, edit, message, tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import app

    get_model(model)().fit(history(3), 0.0, 3 * DAY).save(tmp_path / "m.npz")
    bad = _rewrite(tmp_path / "m.npz", tmp_path / "bad.npz", **edit)
    r = CliRunner().invoke(app, ["workload", "sample", str(bad), "--start", "3d", "--horizon", "1d",
                                 "--out", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [f"error: {bad}: {message}"], r.output
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("model, arrays, message", [
    # stat (and hybrid's count model) saves each job's history row: a row past the history
    ("stat", {"src": np.full(N, N)}, f"array 'src' holds code {N}, but there are only {N} history jobs"),
    ("hybrid", {"src": np.full(N, -1)}, "array 'src' holds -1 at index 0; codes are whole numbers >= 0"),
    ("stat", {"src": np.zeros(N - 2, dtype=np.int64)}, f"array 'src' has {N - 2} values, not {N}"),
    # replay copies the columns of the row it replays: one per job it keeps
    ("replay", {"t": np.linspace(0.0, 3 * DAY, N + 1), "g": np.ones(N + 1, dtype=np.int64), "d": np.ones(N + 1),
                "vc": np.zeros(N + 1, dtype=np.int64)},
     f"array 't' has {N + 1} values, not {N}"),
])
def test_the_rows_a_model_copies_are_rows_of_the_history(model, arrays, message, tmp_path):
    from autosched.workload import WorkloadError

    get_model(model)().fit(history(4), 0.0, 3 * DAY).save(tmp_path / "m.npz")
    bad = _rewrite(tmp_path / "m.npz", tmp_path / "bad.npz", **arrays)
    with pytest.raises(WorkloadError) as e:
        load_model(bad)
    assert str(e.value) == f"{bad}: {message}"
