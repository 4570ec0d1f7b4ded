"""The files the live layer reads - the seed history, the sacct cache and its fetch record - under
the project's input rules: a device or FIFO is refused at once (``/dev/zero`` was read until the
OOM killer came), a binary file is one line naming it, a bad row is skipped and counted with the
user's file and line, a file is read with bounded memory. And the observed trace carries each
job's limit, user, account and partition."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from autosched.live import history
from autosched.live.agent import AgentSettings, init_agent
from autosched.live.errors import LiveError
from autosched.live.fake import FakeConnector
from autosched.live.history import (
    FETCHED_FILE,
    HISTORY_FILE,
    check_seed,
    observation,
    read_fetched,
    read_jobs,
    read_sacct_file,
    read_seed,
    update_history,
)
from live_helpers import HEADER, PINNED_NOW, contended, row

NOW = PINNED_NOW


def seed_file(tmp_path: Path, rows: list[str | bytes], name: str = "seed.txt") -> Path:
    p = tmp_path / name
    p.write_bytes(b"\n".join(r if isinstance(r, bytes) else r.encode() for r in [HEADER, *rows]) + b"\n")
    return p


def good(i: int, t: float = NOW - 600) -> str:
    return row(str(i), t, t + 5, t + 65, 2)


def test_a_device_or_fifo_is_refused_at_once(tmp_path):
    with pytest.raises(LiveError, match=r"^/dev/zero: is a device, not a regular file; expected a seed history"):
        read_seed("/dev/zero", NOW - 3600, NOW)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(LiveError, match=r"fifo: is a FIFO \(named pipe\), not a regular file"):
        read_seed(fifo, NOW - 3600, NOW)
    with pytest.raises(LiveError, match="is a FIFO"):
        check_seed(fifo)
    assert time.monotonic() - t0 < 5  # (opening it would have blocked for ever)


def test_a_binary_file_is_one_line_naming_it(tmp_path):
    p = tmp_path / "model.npz"
    p.write_bytes(b"PK\x03\x04\x00\x00" + bytes(range(256)) * 10)
    for call in (lambda: read_seed(p, NOW - 3600, NOW), lambda: check_seed(p)):
        with pytest.raises(LiveError) as e:
            call()
        assert str(e.value) == (f"{p}: a binary file, not sacct text; a seed history must be the "
                                "output of `sacct --parsable2`")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("JobID|Submit|Caf\xe9\n".encode("latin-1"))
    with pytest.raises(LiveError, match="a binary file, not sacct text"):
        read_seed(latin, NOW - 3600, NOW)
    csv_ = tmp_path / "t.csv"
    csv_.write_text("job_id,submit_time,num_gpus,duration\n1,0,1,10\n")
    with pytest.raises(LiveError, match=r"t.csv: line 1: a seed history must be sacct text.*missing "
                                        r"column\(s\) JobID, Submit, Start, End, AllocTRES"):
        check_seed(csv_)


def test_bad_rows_are_skipped_and_counted_with_the_files_lines(tmp_path):
    # line 1 header; 2 good; 3 NUL bytes; 4 submitted in 2099; 5 not UTF-8; 6 longer than 64 KiB;
    # 7 good; 8 a bad time (the sacct loader's own rule)
    p = seed_file(tmp_path, [
        good(1),
        good(2).encode().replace(b"alice", b"al\x00ice"),
        row("3", 4_070_908_800.0, 4_070_908_805.0, 4_070_908_865.0, 2),  # 2099-01-01
        good(4).encode().replace(b"alice", b"al\xe9ice"),
        good(5) + "x" * (70 * 1024),
        good(6),
        "7|garbage|x|y|gres/gpu=1|gres/gpu=1|a|b|gpu|COMPLETED|j|1|1",
    ])
    jobs = read_seed(p, NOW - 3600, NOW)
    assert jobs.job_id.tolist() == ["1", "6"]
    rules = {r.rule: (r.count, r.examples) for r in jobs.report.drops.values()}
    assert rules["row holds NUL bytes"] == (1, ["line 3"])
    assert rules["submitted after now (a future date)"] == (1, ["line 4 (got '2099-01-01T00:00:00')"])
    assert rules["row is not UTF-8 text"] == (1, ["line 5"])
    assert rules["row longer than 64 KiB"] == (1, ["line 6"])
    # the loader's rule, with the line of the user's file (the loader saw line 4 of what was kept)
    assert rules["time is not of the form YYYY-MM-DDTHH:MM:SS"][1] == ["line 8 (got 'garbage')"]
    assert jobs.malformed == 5 and jobs.report.source == str(p)


def test_a_seed_keeps_only_the_window_it_can_serve(tmp_path):
    # 5000 jobs older than the window, 3 in it: memory holds the 3 (and the header)
    old = [row(str(i), NOW - 90_000 - i, NOW - 90_000, NOW - 89_000, 1) for i in range(1, 5001)]
    old_steps = [r.replace("|", ".batch|", 1) for r in old[:10]]
    p = seed_file(tmp_path, [*old, *old_steps, good(6001), good(6002), good(6002).replace("6002", "6002.batch", 1),
                             good(6003)])
    got = read_sacct_file(p, "seed history", since=NOW - 3600, until=NOW)
    assert got.text.splitlines() == [HEADER, good(6001), good(6002),
                                     good(6002).replace("6002", "6002.batch", 1), good(6003)]
    assert got.lines == [1, 5012, 5013, 5014, 5015]
    assert got.skipped.dropped == 0  # older jobs are not faults
    assert read_seed(p, NOW - 3600, NOW).job_id.tolist() == ["6001", "6002", "6003"]


def test_a_file_larger_than_the_bound_is_refused(tmp_path, monkeypatch):
    p = seed_file(tmp_path, [good(1), good(2)])
    monkeypatch.setattr(history, "MAX_HISTORY_BYTES", 100)
    with pytest.raises(LiveError, match=rf"^{p}: 0.0 GiB is more than a seed history may have"):
        read_seed(p, NOW - 3600, NOW)


def test_a_loader_error_names_the_source_not_a_temporary_file():
    with pytest.raises(LiveError) as e:
        read_jobs("JobID|Submit|Start|End\n1|x|y|z\n", source="old.txt")
    assert "old.txt" in str(e.value) and "/tmp" not in str(e.value) and "sacct.txt" not in str(e.value)


def test_fetch_record_and_cache_garbage_is_one_line_naming_the_file(tmp_path):
    f = tmp_path / FETCHED_FILE
    assert read_fetched(f) is None
    for text, why in (("{", "Expecting"), ("[]", "a JSON list, not an object"), ('{"until": "soon"}', "'until' is 'soon'"),
                      ('{"until": NaN}', "'until' is nan"), ('{"at": 1}', "no 'until'"),
                      ("\xff\xfe", "UnicodeDecodeError")):
        f.write_bytes(text.encode("latin-1"))
        with pytest.raises(LiveError) as e:
            read_fetched(f)
        msg = str(e.value)
        assert msg.startswith(f"{f}: not the agent's fetch record (") and why in msg, msg
        assert msg.endswith("delete it and the next round fetches the history window again")
        assert "\n" not in msg
    f.write_text(json.dumps({"until": 12.5}))
    assert read_fetched(f) == 12.5


def fake_agent(tmp_path: Path, **kw):
    FakeConnector.create(tmp_path / "fake", sacct=contended(NOW), nodes=1, gpus_per_node=8).update(clock=NOW)
    return init_agent(tmp_path / "state", AgentSettings(
        connector={"kind": "fake", "directory": str(tmp_path / "fake")}, period=3600,
        history=4 * 3600, min_jobs=1000, budget=3, model="replay", **kw))


@pytest.mark.parametrize("name, content, expected", [
    (FETCHED_FILE, b"garbage", f"/{FETCHED_FILE}: not the agent's fetch record (Expecting value"),
    (HISTORY_FILE, b"\x00\x01binary", f"/{HISTORY_FILE}: a binary file, not sacct text; a history cache"),
    (HISTORY_FILE, b"a,b,c\n1,2,3\n", f"/{HISTORY_FILE}: line 1: a history cache must be sacct text"),
])
def test_a_round_over_garbage_in_the_state_dir_is_blocked_naming_the_file(tmp_path, name, content, expected):
    agent = fake_agent(tmp_path)
    (agent.state_dir / name).write_bytes(content)
    out = agent.step().to_summary()
    assert out["action"] == "blocked" and out["why"].startswith("cannot read the history: "), out
    assert expected in out["why"] and "\n" not in out["why"]
    assert out["why"].endswith("delete it and the next round fetches the history window again")
    (agent.state_dir / name).unlink()  # as the message says: the next round reads the history
    assert agent.step().why.startswith("too little history: 60 jobs finished")


@pytest.mark.parametrize("kind", ["/dev/zero", "binary"])
def test_a_round_with_a_bad_seed_is_blocked_at_once(tmp_path, kind):
    """Init refuses the bad seed and writes nothing; a seed that became bad after init blocks
    the round at once."""
    bad = tmp_path / "seed.bad"
    if kind == "binary":
        bad.write_bytes(os.urandom(4096).replace(b"\n", b"\x00"))
    else:
        bad.symlink_to(kind)
    with pytest.raises(LiveError, match=f"^{bad}: "):
        fake_agent(tmp_path / "refused", seed_history=str(bad))
    assert not (tmp_path / "refused" / "state").exists()
    seed = str(seed_file(tmp_path, [good(9001)]))
    agent = fake_agent(tmp_path, seed_history=seed)
    Path(seed).unlink()
    os.replace(bad, seed)
    t0 = time.monotonic()
    out = agent.step().to_summary()
    assert time.monotonic() - t0 < 30
    assert out["action"] == "blocked" and out["why"].startswith(f"cannot read the history: {seed}: ")
    assert "\n" not in out["why"]


def test_a_seed_with_a_future_row_and_a_huge_job_counts_them(tmp_path):
    # 2099 is skipped while reading; 999,999 GPUs is read but the twin cannot place it (more
    # GPUs than the cluster): the round counts it as left out, not in its history, and `agent
    # twin` says so
    seed = seed_file(tmp_path, [good(9001), row("9002", 4_070_908_800.0, None, None, 2),
                                row("9003", NOW - 500, NOW - 490, NOW - 400, 999_999)])
    agent = fake_agent(tmp_path, seed_history=str(seed))
    out = agent.step().to_summary()
    assert out["malformed_rows"] == 1 and out["history_jobs"] == 60 + 1
    assert out["left_out"] == {"more GPUs than its partition has": 1}
    from autosched.live.view import observe_twin

    _, view = observe_twin(agent.connector, agent.state_dir, agent.settings.history, str(seed))
    assert "1 job(s) of the history left out of the twin: more GPUs than its partition has" in view["warnings"]
    assert "1 malformed sacct row(s) skipped" in view["warnings"]


def test_a_read_only_view_writes_nothing(tmp_path):
    agent = fake_agent(tmp_path)
    jobs = update_history(agent.state_dir, agent.connector.sacct_rows, NOW, 3600.0, save=False)
    assert len(jobs) > 0
    assert not (agent.state_dir / HISTORY_FILE).exists() and not (agent.state_dir / FETCHED_FILE).exists()
    update_history(agent.state_dir, agent.connector.sacct_rows, NOW, 3600.0)
    assert read_fetched(agent.state_dir / FETCHED_FILE) == NOW


def test_the_observed_trace_carries_limits_users_accounts_and_partitions():
    # at 2000: j1 finished (limit 10 min), j2 runs since 1500 (limit 30 min: 1300 s left),
    # j3 pends (no limit), j4 runs past its limit (1 s left, as Slurm is about to end it)
    text = "\n".join([
        HEADER,
        row("1", 1000, 1000, 1100, 2, user="alice", account="physics", limit="10:00"),
        row("2", 1200, 1500, None, 4, user="bob", account="chemistry", limit="30:00"),
        row("3", 1900, None, None, 1, user="carol", account="physics", limit="UNLIMITED"),
        row("4", 1000, 1000, None, 1, user="carol", account="physics", limit="5:00"),
    ]).replace("|gpu|", "|urgent|", 1) + "\n"
    jobs = read_jobs(text)
    obs, origin = observation(jobs, 2000.0, 3600.0)
    h = obs.history
    order = np.argsort(h.job_id.astype(int))
    assert h.job_id[order].tolist() == ["1", "2", "3", "4"]
    np.testing.assert_array_equal(h.time_limit[order], [600.0, 1800.0, np.nan, 300.0])
    assert h.user[order].tolist() == ["alice", "bob", "carol", "carol"]
    assert h.account[order].tolist() == ["physics", "chemistry", "physics", "physics"]
    assert h.partition[order].tolist() == ["urgent", "gpu", "gpu", "gpu"]
    assert h.num_cpus.tolist() == [1, 1, 1, 1]
    b = obs.backlog
    lim = dict(zip(b.job_id.tolist(), b.time_limit.tolist()))
    assert lim["2"] == 1800.0 - 500.0 and np.isnan(lim["3"]) and lim["4"] == 1.0
    assert b.user.tolist() and set(b.account.tolist()) == {"physics", "chemistry"}


def test_a_cluster_without_history_gives_an_empty_cache_that_reads_back(tmp_path):
    # a fake cluster whose sacct prints nothing: the cache is written empty, and the next round
    # reads it as no history (not as a file that is not sacct text)
    FakeConnector.create(tmp_path / "fake").update(clock=NOW)
    agent = init_agent(tmp_path / "state", AgentSettings(
        connector={"kind": "fake", "directory": str(tmp_path / "fake")}, period=3600, history=3600))
    for _ in range(2):
        out = agent.step().to_summary()
        assert out["action"] == "blocked" and out["why"].startswith("too little history: 0 jobs"), out
    assert (agent.state_dir / HISTORY_FILE).read_text() == ""
