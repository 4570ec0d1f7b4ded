"""benchmarks/closed_loop.py: the closed loop on two real Slurm test clusters.

The pure parts (window selection and thinning, time limits, the seed history, the figures of a
run) are checked on tiny inputs worked out by hand; one `slurm` test runs the short "ci" plan on
two real clusters (one compressed day, about 80 jobs, a small budget) and checks that the harness
works and every job is accounted for, not the gain."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autosched import switchback as sb
from autosched.trace.io import load_trace
from autosched.trace.limits import add_time_limits
from autosched.trace.table import Trace
from conftest import script_module
from testbed import SCRIPT, free_port_bases, missing_slurm, unavailable

cl = script_module("benchmarks/closed_loop.py")
tw = script_module("benchmarks/slurm_twin.py")
DAY = 86400.0
T0 = 1_700_000_000.0  # 2023-11-14T22:13:20 UTC


def _trace(submit_days, gpus, durations, vcs, limits=None) -> Trace:
    cols = {"job_id": np.arange(len(gpus)), "submit_time": np.array(submit_days) * DAY,
            "num_gpus": gpus, "duration": np.array(durations, dtype=float), "vc": vcs}
    if limits is not None:
        cols["time_limit"] = np.array(limits, dtype=float)
    return Trace.from_columns(cols)


# -- time limits ----------------------------------------------------------------------------

def test_time_limit_compresses_the_traces_own_limit_and_never_cuts_the_run():
    # 2 trace hours at 120x: 60 s -> 1 min; the run of 70 s needs ceil(75 / 60) = 2 min
    assert cl.time_limit_min(7200.0, 30, 120.0) == 1
    assert cl.time_limit_min(7200.0, 70, 120.0) == 2
    # 1 trace day at 120x: 720 s -> 12 min
    assert cl.time_limit_min(DAY, 30, 120.0) == 12


def test_jobs_without_a_limit_get_the_one_trace_limits_writes():
    # the limits of `autosched trace limits TRACE` (seed 0) where the trace has none, its own
    # limits kept; each never below the run time
    tr = _trace([0.5, 1.0, 1.5], [1, 2, 4], [600.0, 7200.0, 30000.0], ["x", "y", "x"])
    want = add_time_limits(tr, seed=0)[0].time_limit
    assert np.array_equal(cl.trace_limits(tr), want) and (want >= tr.duration).all()
    with_one = tr.replace(time_limit=np.array([3600.0, np.nan, np.nan]))
    got = cl.trace_limits(with_one)
    assert got[0] == 3600.0 and np.array_equal(got[1:], add_time_limits(with_one, seed=0)[0].time_limit[1:])


def test_slurm_minutes():
    assert cl.slurm_minutes(5) == "00:05:00"
    assert cl.slurm_minutes(61) == "01:01:00"
    assert cl.slurm_minutes(1500) == "1-01:00:00"


# -- the window -----------------------------------------------------------------------------

PLAN = cl.Plan("t", start_day=1.0, days=1.0, before_days=1.0, load=0.5, seed=0, scale=864.0,
               cap=DAY, dmin=1)  # one trace day = 100 wall s


def test_select_by_hand():
    # a: the day before (1 GPU, 0.1 day -> 10 s); b: at the window's start, 8 GPUs, half a day
    # (50 s); c: 16 GPUs (more than a node: left out); d: 4 GPUs, two days cut to the cap of one
    # day (100 s). Offered load before thinning: (8 x 43200 + 4 x 86400) / (32 x 86400) = 0.25,
    # so a target of 0.5 keeps everything, and the clusters get (8 x 50 + 4 x 100) / (32 x 100).
    tr = _trace([0.5, 1.0, 1.5, 1.75], [1, 8, 16, 4], [8640, 43200, 100, 2 * DAY], ["x", "y", "z", "x"])
    sel = cl.select(tr, PLAN)
    assert sel.full_load == pytest.approx(0.25)
    assert sel.fraction == 1.0
    assert sel.offered_load == pytest.approx(0.25)
    assert [(j.name, j.submit, j.gpus, j.seconds, j.user, j.account) for j in sel.jobs] == [
        ("cl-0000", 0.0, 8, 50, "bob", "chemistry"), ("cl-0001", 75.0, 4, 100, "alice", "physics")]
    assert [(j.name, j.submit, j.seconds, j.user) for j in sel.before] == [("cls-0000", -50.0, 10, "alice")]


def test_select_thins_to_the_target_with_one_draw_for_the_whole_trace():
    # target 0.125 of a window whose load is 0.25: half the jobs on average; the same draw decides
    # a job whether its day is the window or the day before
    tr = _trace(np.linspace(0.0, 1.99, 400), [1] * 400, [0.1 * DAY] * 400, ["x"] * 400)
    load = float(np.sum(tr.duration[tr.submit_time >= DAY])) / (32 * DAY)
    sel = cl.select(tr, cl.Plan("t", start_day=1.0, days=1.0, before_days=1.0, load=load / 2,
                                seed=3, scale=864.0, cap=DAY))
    assert sel.fraction == pytest.approx(0.5)
    keep = np.random.default_rng(3).random(400) < 0.5
    assert len(sel.jobs) == int(keep[tr.submit_time >= DAY].sum())
    assert len(sel.before) == int(keep[tr.submit_time < DAY].sum())


def test_select_uses_the_traces_users_accounts_and_limits():
    tr = Trace.from_columns({
        "job_id": [0, 1, 2], "submit_time": [DAY, DAY + 10, DAY + 20], "num_gpus": [1, 1, 1],
        "duration": [600.0, 600.0, 600.0], "user": ["u1", "u2", "u1"], "account": ["a1", "a1", "a2"],
        "time_limit": [3 * 3600.0, 3600.0, np.nan]})
    sel = cl.select(tr, cl.Plan("t", start_day=1.0, days=1.0, before_days=1.0, load=1.0, scale=120.0))
    # users u1, u2 -> alice, bob; accounts a1, a2 -> physics, chemistry; limits 3 h / 120 = 90 s
    # -> 2 min, 1 h -> 30 s, but the 5 s run needs 1 min; no limit: the model's, compressed
    drawn = cl.time_limit_min(float(cl.trace_limits(tr)[2]), 5, 120.0)
    assert [(j.user, j.account, j.limit_min) for j in sel.jobs] == [
        ("alice", "physics", 2), ("bob", "physics", 1), ("alice", "chemistry", drawn)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.99), st.sampled_from([1, 2, 4, 8, 16]),
                          st.floats(1.0, 3 * DAY)), min_size=1, max_size=40),
       st.floats(0.05, 2.0), st.integers(0, 5))
@example(rows=[(1.0, 1, 1.0), (0.999999, 1, 1.0)], load=1.0, seed=0)  # 0.09 ms before the window
def test_select_properties(rows, load, seed):
    tr = _trace([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], ["v"] * len(rows))
    plan = cl.Plan("t", start_day=1.0, days=1.0, before_days=1.0, load=load, seed=seed,
                   scale=864.0, cap=0.5 * DAY, dmin=1)
    in_window = (tr.submit_time >= DAY) & (tr.submit_time < 2 * DAY) & (tr.num_gpus <= 8)
    if not in_window.any():
        with pytest.raises(cl.InputError):
            cl.select(tr, plan)
        return
    sel = cl.select(tr, plan)
    assert 0 < sel.fraction <= 1
    for j in sel.jobs:
        assert 0 <= j.submit <= 100 and j.gpus <= 8 and 1 <= j.seconds <= 50
        assert j.limit_min * 60 >= j.seconds + 5
    assert all(-100 <= j.submit < 0 for j in sel.before)
    assert sel.offered_load == pytest.approx(sum(j.gpus * j.seconds for j in sel.jobs) / (32 * 100))
    if sel.fraction == 1:
        assert len(sel.jobs) == int(in_window.sum())


# -- the seed history ------------------------------------------------------------------------

def test_seed_history_runs_the_window_before_and_keeps_what_ended_before_t0():
    # five 8-GPU jobs of 100 s at t0 - 1000 on 32 GPUs: four start at once, the fifth when they
    # end (t0 - 900) and ends at t0 - 800; a sixth, submitted at t0 - 50 for 60 s, is still
    # running at t0 and is left out
    jobs = [tw.Job(f"cls-{i:04d}", -1000.0, 8, 100, 2, "alice", "physics") for i in range(5)]
    jobs.append(tw.Job("cls-0005", -50.0, 8, 60, 2, "bob", "chemistry"))
    text = cl.seed_history(jobs, T0, cl.baseline(120.0), None)
    rows = list(csv.DictReader(text.splitlines(), delimiter="|"))
    assert [r["JobName"] for r in rows] == [f"cls-{i:04d}" for i in range(5)]
    assert [r["JobID"] for r in rows] == [str(1_000_000 + i) for i in range(5)]
    assert {r["Submit"] for r in rows} == {"2023-11-14T21:56:40"}  # t0 - 1000
    assert [r["Start"] for r in rows] == ["2023-11-14T21:56:40"] * 4 + ["2023-11-14T21:58:20"]
    assert rows[4]["End"] == "2023-11-14T22:00:00"
    assert {r["Timelimit"] for r in rows} == {"00:02:00"} and {r["State"] for r in rows} == {"COMPLETED"}


def test_seed_history_is_sacct_text_autosched_reads(tmp_path):
    jobs = [tw.Job("cls-0000", -300.0, 2, 40, 1, "carol", "chemistry")]
    path = tmp_path / "seed.sacct"
    path.write_text(cl.seed_history(jobs, T0, cl.baseline(120.0), None))
    trace, report = load_trace(path, format="slurm")
    assert len(trace) == 1 and not report.drops
    assert trace.num_gpus[0] == 2 and trace.duration[0] == 40 and trace.time_limit[0] == 60
    assert trace.user[0] == "carol" and trace.account[0] == "chemistry"


def test_a_sacct_row_sizes_the_job_as_the_clusters_def_cpu_per_gpu_does():
    # as the test cluster's sacct shows a `--gres=gpu:4` job: the gpu partition bills CPU 1, GPU
    # 4; DefMemPerCPU is 512 MB. The request is one CPU; unset, the job runs on one; with
    # DefCpuPerGPU=1 on 4 and 2 GB (sacct prints whole gigabytes as G). A waiting job has no
    # allocation and NCPUS 1 either way
    job = tw.Job("cls-0000", 0.0, 4, 40, 1, "carol", "chemistry")

    def fields(cpg: int, start: float | None = T0 + 1) -> dict[str, str]:
        return dict(zip(cl.SACCT_FIELDS, cl.sacct_row(7, job, T0, start, None, cpg).split("|")))

    asked = "billing=17,cpu=1,gres/gpu=4,mem=512M,node=1"
    assert (fields(0)["AllocTRES"], fields(0)["ReqTRES"], fields(0)["NCPUS"]) == (asked, asked, "1")
    assert (fields(1)["AllocTRES"], fields(1)["ReqTRES"], fields(1)["NCPUS"]) == (
        "billing=20,cpu=4,gres/gpu=4,mem=2G,node=1", asked, "4")
    assert (fields(1, None)["AllocTRES"], fields(1, None)["ReqTRES"], fields(1, None)["NCPUS"]) == ("", asked, "1")


def test_the_seed_history_carries_the_cpus_a_sized_cluster_gives(tmp_path):
    # `autosched trace` and the agent read what a job asked for (ReqTRES: one where the cluster
    # sizes it by DefCpuPerGPU), which the twin sizes by that DefCpuPerGPU (ClusterSpec.job_cpus);
    # the allocation (NCPUS) holds the CPUs it had
    from autosched.live.history import read_jobs

    jobs = [tw.Job("cls-0000", -300.0, 2, 40, 1, "carol", "chemistry"),
            tw.Job("cls-0001", -300.0, 8, 40, 1, "alice", "physics")]
    for cpg, allocated in ((0, [1, 1]), (1, [2, 8])):
        path = tmp_path / f"seed-{cpg}.sacct"
        path.write_text(cl.seed_history(jobs, T0, cl.baseline(120.0), None, cpg))
        trace, report = load_trace(path, format="slurm")
        assert not report.drops and trace.num_cpus is not None
        assert trace.num_cpus.tolist() == [1, 1]
        assert read_jobs(path.read_text()).cpus.tolist() == [1, 1]
        rows = cl.read_sacct(path)
        assert [int(r["NCPUS"]) for r in rows] == allocated


@pytest.mark.parametrize("p", ["-0.1", "1.5", "nan", "inf"])
def test_a_persistence_out_of_range_is_refused_before_anything_starts(p, no_clusters, tmp_path, capsys):
    assert cl.main(["--run", "sb-s18", "--out", str(tmp_path), "--persistence", p]) == 2
    assert capsys.readouterr().err == f"error: --persistence: persistence must be in [0, 1] (got {float(p):g})\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("n", [-1, 2])
def test_a_def_cpu_per_gpu_the_test_nodes_cannot_give_is_refused(n, no_clusters, tmp_path, capsys):
    assert cl.main(["--run", "sb-s18", "--out", str(tmp_path), "--def-cpu-per-gpu", str(n)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: --def-cpu-per-gpu {n}: must be 0-1: a test node has 8 CPUs for 8 GPUs, so an "
                   "8-GPU job could get no node\n")
    assert list(tmp_path.iterdir()) == []


def test_the_twin_reads_a_real_runs_jobs_with_the_cpus_they_asked_for(tmp_path):
    # a run on clusters with DefCpuPerGPU=1: sacct gives a started 8-GPU job NCPUS 8 and ReqTRES
    # cpu=1; the twin takes the request (its TRES factor weighs it) and sizes the job by the
    # cluster's DefCpuPerGPU again
    jobs = [tw.Job("cl-0000", 0.0, 8, 40, 1, "carol", "chemistry"), tw.Job("cl-0001", 0.0, 2, 40, 1, "bob", "physics")]
    rows = [cl.sacct_row(k + 1, j, T0, T0 + 1, T0 + 41, 1) for k, j in enumerate(jobs)]
    path = tmp_path / "sacct-A.txt"
    path.write_text("\n".join(["|".join(cl.SACCT_FIELDS), *rows]) + "\n")
    assert [r.split("|")[-1] for r in rows] == ["8", "2"]
    real = tw.read_run(path, "cl")
    assert real.trace.num_cpus is not None and real.trace.num_cpus.tolist() == [1, 1]
    spec = tw.testbed_cluster(1)
    assert spec.job_cpus(real.trace.num_gpus, real.trace.num_cpus).tolist() == [8, 2]
    assert spec.asked_cpus(real.trace.num_gpus, real.trace.num_cpus).tolist() == [1, 1]


def test_agent_moves_lists_a_loops_changes_and_its_rollback(tmp_path):
    # one trace day = 720 s; the change applied 360 s after t0 (0.50 d), rolled back at 1080 s
    t0 = 1000.0
    history = [
        {"id": "3", "trigger": "rollback to 1", "applied_at": t0 + 1080, "evidence": {"predicted_gain": None},
         "diff": {"PriorityFavorSmall": [True, False]}},
        {"id": "2", "trigger": "contention: queue 22 jobs", "applied_at": t0 + 360,
         "evidence": {"predicted_gain": 0.0869}, "diff": {"PriorityFavorSmall": [False, True]}},
        {"id": "1", "trigger": "baseline", "applied_at": t0, "evidence": {}, "diff": {}},
    ]
    (tmp_path / "agent-status.json").write_text(json.dumps({"history": history}))
    assert cl.agent_moves(tmp_path, t0, 720.0) == (
        "0.50 d: PriorityFavorSmall False → True (predicted +8.7%); "
        "1.50 d: PriorityFavorSmall True → False (rollback to 1)")
    # one change alone: the decision says it all
    (tmp_path / "agent-status.json").write_text(json.dumps({"history": history[1:]}))
    assert cl.agent_moves(tmp_path, t0, 720.0) == ""


def test_baseline_scales_the_testbeds_time_constants():
    b = cl.baseline(120.0)
    assert b["PriorityMaxAge"] == 7 * DAY / 120 == 5040.0  # 7 days -> 84 min
    assert b["PriorityDecayHalfLife"] == DAY / 120 == 720.0
    assert b["bf_window"] == 12  # minutes: one compressed day
    assert b["bf_interval"] == 1 and b["bf_resolution"] == 1  # 30 s and 60 s: Slurm's 1 s floor
    b = cl.baseline(1440.0)
    assert b["PriorityMaxAge"] == b["PriorityDecayHalfLife"] == 600.0  # the knobs' floor of 10 min
    assert b["bf_window"] == 1


# -- a run's figures ------------------------------------------------------------------------

def _row(name, submit, start, end, account="physics", state="COMPLETED"):
    def s(t):
        return cl.stamp(T0 + t)
    return {"JobName": name, "Submit": s(submit), "Start": s(start), "End": s(end),
            "Account": account, "State": state}


def test_realized_by_hand():
    rows = [_row("cl-0000", 0, 0, 10), _row("cl-0001", 0, 4, 6, "chemistry"),
            _row("cl-0002", 10, 30, 40, state="TIMEOUT"), _row("other", 0, 100, 200)]
    got, times = cl.realized(rows, {"cl-0000", "cl-0001", "cl-0002", "cl-0003"})
    assert (got.submitted, got.recorded, got.completed) == (4, 3, 2)
    # waits 0, 4, 20; JCTs 10, 6, 30
    assert got.avg_wait == pytest.approx(8.0) and got.avg_jct == pytest.approx(46 / 3)
    assert got.p95_wait == pytest.approx(np.percentile([0, 4, 20], 95))
    assert got.wait_by_account == {"chemistry": 4.0, "physics": 10.0}
    assert times["cl-0001"] == (T0, T0 + 4, T0 + 6)


def test_applied_changes_and_the_configs_in_force():
    ev = {"time": T0 + 5, "state": "applied"}
    status = {"history": [
        {"id": 3, "trigger": "period", "parent": 2, "config": {"PriorityWeightAge": 9},
         "diff": {"PriorityWeightAge": [5, 9]}, "events": [{"time": T0 + 90, "state": "proposed"},
                                                            {"time": T0 + 100, "state": "applied"}],
         "evidence": {"predicted_gain": 0.05, "spread": 0.01}, "outcome": None},
        {"id": 2, "trigger": "period", "parent": 1, "config": {"PriorityWeightAge": 5},
         "diff": {}, "events": [ev], "evidence": {}, "outcome": {"verdict": "kept: x"}},
        {"id": 4, "trigger": "period", "parent": 3, "config": {}, "diff": {},
         "events": [{"time": T0 + 200, "state": "proposed"}], "evidence": {}},
        {"id": 1, "trigger": "baseline", "parent": None, "config": {"PriorityWeightAge": 1},
         "diff": {}, "events": [{"time": T0 - 50, "state": "applied"}], "evidence": {}}]}
    got = cl.applied_changes(status, T0)
    assert [(c.revision, c.at, c.predicted_gain, c.spread, c.agent_verdict) for c in got] == [
        (2, 5.0, None, None, "kept: x"), (3, 100.0, 0.05, 0.01, "not judged")]
    full = cl.configs_in_force(status, {"PriorityWeightAge": 1000, "bf_interval": 1})
    assert full[3] == {"PriorityWeightAge": 9, "bf_interval": 1}


def test_period_gain_compares_the_same_jobs():
    a = {"x": (0.0, 0.0, 10.0), "y": (5.0, 5.0, 25.0), "z": (50.0, 50.0, 60.0)}
    b = {"x": (0.0, 0.0, 8.0), "y": (5.0, 6.0, 18.0), "z": (50.0, 50.0, 60.0)}
    # jobs submitted on B in [0, 10): x and y; A: JCT 10 and 20 (15), B: 8 and 13 (10.5)
    assert cl.period_gain(a, b, 0.0, 10.0) == pytest.approx((15 - 10.5) / 15)
    assert cl.period_gain(a, b, 100.0, 10.0) is None


def _result(name, jct_a, jct_b, aa=False, tau=0.95, err=0.05, lost=0, changed=True):
    def real(jct):
        return cl.Realized(10, 10 - lost, 10 - lost, jct, 1.0, 2.0, {})
    changes = [cl.Change(2, 100.0, {}, 0.05, 0.01, "kept")] if changed and not aa else []
    return cl.RunResult(name, {"aa": aa}, 0.85, 0.2, 10, None, None,
                        {"A": real(jct_a), "B": real(jct_b)},
                        {"A": cl.Twin(tau, 1.0 + err, 1.0), "B": cl.Twin(tau, 1.0, 1.0)}, changes)


def test_targets_in_words():
    # A/A gap 2%; B gains 5% (more than 4%: a win), 1% (neither) and -3% (a loss beyond the gap)
    res = [_result("w1", 100, 95), _result("w2", 100, 99), _result("w3", 100, 103),
           _result("aa", 100, 102, aa=True, tau=0.85, err=0.2, lost=1)]
    lines = cl.targets(res)
    assert lines[0] == "no job lost: NOT met: aa A: 1, aa B: 1"
    assert lines[1] == ("gain over the baseline (A/A gap 2.00%), the agent on the `stat` model: B beats A over the "
                        "whole window by more than 4.00% (twice the gap), with a change made, on 1 of 3 window(s) "
                        "(w1); worse than A by more than the gap on w3 — not met")
    assert lines[2] == ("twin accuracy (avg wait within 10%, τ ≥ 0.9): not met on aa A (τ 0.850, "
                        "wait +20.0%), aa B (τ 0.850, wait +0.0%)")
    assert "— met" in cl.targets([_result("w1", 100, 95), _result("w2", 100, 94), _result("w3", 100, 100),
                                   _result("aa", 100, 101, aa=True)])[1]
    # windows run with the agent on another model are judged apart: two lines, one per model
    replay = _result("w1-replay", 100, 90)
    replay.plan["model"] = "replay"
    lines = cl.targets([_result("w1", 100, 95), replay, _result("aa", 100, 101, aa=True)])
    assert lines[1].endswith("`stat` model: B beats A over the whole window by more than 2.00% (twice the gap), "
                             "with a change made, on 1 of 1 window(s) (w1) — 2 of the 3 windows not run yet")
    assert lines[2].startswith("gain over the baseline (A/A gap 1.00%), the agent on the `replay` model: B beats A "
                               "over the whole window by more than 2.00% (twice the gap), with a change made, "
                               "on 1 of 1 window(s) (w1-replay)")
    clock = _result("w1-clock", 100, 97)
    clock.plan["model_trace_time"] = True
    lines = cl.targets([_result("w1", 100, 95), clock, _result("aa", 100, 101, aa=True)])
    assert lines[2].startswith("gain over the baseline (A/A gap 1.00%), the agent on the `stat` model on trace time: "
                               "B beats A over the whole window by more than 2.00% (twice the gap), with a change "
                               "made, on 1 of 1 window(s) (w1-clock)")
    # a lead where the agent changed nothing is the noise of two clusters, not a win
    lines = cl.targets([_result("w1", 100, 95), _result("w2", 100, 94), _result("w3", 100, 90, changed=False),
                        _result("aa", 100, 101, aa=True)])
    assert lines[1].endswith("with a change made, on 2 of 3 window(s) (w1, w2); no change on w3 (+10.0%) — met")
    lines = cl.targets([_result("w1", 100, 95), _result("w2", 100, 94, changed=False),
                        _result("w3", 100, 90, changed=False), _result("aa", 100, 101, aa=True)])
    assert lines[1].endswith("with a change made, on 1 of 3 window(s) (w1); no change on w2 (+6.0%), w3 (+10.0%) "
                             "— not met")
    # `replay` replays the last period as it was: it has no clock to put on trace time
    assert cl.agent_model({"model": "replay", "model_trace_time": True}) == "`replay` model"


def test_render_doc_replaces_only_the_generated_section():
    doc = f"# T\n\nintro\n{cl.BEGIN}\nold\n{cl.END}\nafter\n"
    assert cl.render_doc(doc, "new\n") == f"# T\n\nintro\n{cl.BEGIN}\nnew\n{cl.END}\nafter\n"


def test_the_docs_tables_recompute_from_the_committed_runs(capsys):
    assert cl.analyse(cl.RESULTS, check=True) == 0, \
        "docs/closed-loop.md is not current: run benchmarks/closed_loop.py --analyse"


def test_the_judge_benchmark_rebuilds_the_period_the_agent_judged():
    # what really happened in the period does not depend on the replay code: the rebuilt history
    # must give the realized figures the agent stored, or the judge's timing is of another period
    jc = script_module("benchmarks/judge_cost.py")
    period = jc.test_bed("w2-scaled")
    assert period.seed == 0 and period.recorded is not None
    assert {k for k in period.old if period.old[k] != period.new[k]} == {
        "PriorityWeightFairshare", "PriorityWeightTRES.GRES/gpu"}
    cf = jc.counterfactual(period.jobs, period.cluster, "multifactor", period.old, period.new,
                           period.change, period.until, period.now, period.seed, 0)
    jc.check_recorded(period, cf)  # raises SystemExit on a difference
    assert (cf.realized.jobs, cf.realized.finished) == (599, 453)
    broken = jc.Period(**{**vars(period), "recorded": {**period.recorded, "realized": {
        **period.recorded["realized"], "finished": 452}}})
    with pytest.raises(SystemExit, match="the agent judged 599 .452 finished"):
        jc.check_recorded(broken, cf)


# -- bad flags: refused before any cluster starts ---------------------------------------------

@pytest.fixture
def no_clusters(monkeypatch):
    """Fail the test if the harness gets as far as starting a cluster or a run."""
    def started(*a, **k):
        raise AssertionError("a cluster was started")
    monkeypatch.setattr(cl, "start_all", started)
    monkeypatch.setattr(cl, "run", started)


@pytest.mark.parametrize("flags, message", [
    (["--trace", "/nonexistent.csv"], "--trace /nonexistent.csv: no such file"),
    (["--trace", "/dev/zero"], "--trace /dev/zero: no such file"),  # not a regular file: never read
    (["--load", "nan"], "--load nan: the offered load must be in (0, 1.5]"),
    (["--load", "1e9"], "--load 1000000000.0: the offered load must be in (0, 1.5]"),
    (["--load", "-1"], "--load -1.0: the offered load must be in (0, 1.5]"),
    (["--load", "0"], "--load 0.0: the offered load must be in (0, 1.5]"),
    (["--model", "nosuch"], "--model 'nosuch': unknown workload model; known: replay, stat, hybrid, neural"),
    (["--port-base", "99999"], "--port-base 99999: must be in 1024-65416"),
    (["--port-base", "65417"], "--port-base 65417: must be in 1024-65416"),  # B's last: 65417 + 119 > 65535
    (["--port-base", "80"], "--port-base 80: must be in 1024-65416"),
    (["--name", "../../escape"], "--name '../../escape': a run's name is one directory name"),
    (["--name", ".hidden"], "--name '.hidden': a run's name is one directory name"),
    (["--roots", "onlyone"], "--roots 'onlyone': give the two clusters' roots, comma-separated"),
    (["--roots", "/tmp/a,"], "--roots '/tmp/a,': give the two clusters' roots, comma-separated"),
    (["--start-day", "-3"], "--start-day -3.0: must be a day >= 0 of the trace"),
    (["--seed", "-1"], "--seed -1: a seed is an integer >= 0"),
    (["--control", "age only"], "--control 'age only': a control is arm 1 of a block design"),  # w1: side by side
    (["--in-window"], "--in-window: the agent's loop through the window of a block design"),  # w1: side by side
    (["--design", "crossover-by-run", "--blocks", "2"], "--blocks 2: a crossover by run is one block"),
    (["--design", "crossover-by-block", "--blocks", "1"], "--blocks 1: an even number of blocks"),
    (["--design", "crossover-by-run", "--in-window"], "--in-window: a crossover by run has one block"),
])
def test_a_bad_flag_is_one_error_line_before_anything_starts(flags, message, no_clusters, tmp_path, capsys):
    assert cl.main(["--run", "w1", "--out", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + message) and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_port_base_in_the_ephemeral_range_is_refused(no_clusters, tmp_path, capsys, monkeypatch):
    # a cluster at base 36400 failed to start when an outgoing connection took its port
    monkeypatch.setattr(cl, "ephemeral_ports", lambda: (32768, 60999))
    assert cl.main(["--run", "w1", "--out", str(tmp_path), "--port-base", "32700"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --port-base 32700: its ports (32700-32819) reach into the kernel's ephemeral range "
                   "32768-60999, where an outgoing connection can take one before a daemon binds it; choose a "
                   "base below 32649\n")
    assert list(tmp_path.iterdir()) == []
    rng = tmp_path / "range"
    rng.write_text("32768\t60999\n")
    monkeypatch.undo()
    monkeypatch.setattr(cl, "EPHEMERAL", rng)
    assert cl.ephemeral_ports() == (32768, 60999)
    monkeypatch.setattr(cl, "EPHEMERAL", tmp_path / "none")
    assert cl.ephemeral_ports() is None


@pytest.mark.parametrize("control, message", [
    ("nosuch=1", "--control 'nosuch=1': neither an archetype (GPU first, "),
    ("fair-share heav", "--control 'fair-share heav': neither an archetype (GPU first, "),
    ("bf_max_job_test=lots", "--control 'bf_max_job_test=lots': neither an archetype"),
    ("bf_max_job_test=0", "--control 'bf_max_job_test=0': neither an archetype"),  # below its range
    ("bf_interval=nan", "--control 'bf_interval=nan': neither an archetype"),
    ("bf_window=1e400", "--control 'bf_window=1e400': neither an archetype"),
    ("bf_max_job_test=1,bf_max_job_test=2", "--control 'bf_max_job_test=1,bf_max_job_test=2': "
                                            "bf_max_job_test given more than once"),
    (",", "--control ',': name an archetype or give KNOB=VALUE pairs"),
])
def test_a_bad_control_is_one_error_line_before_anything_starts(control, message, no_clusters, tmp_path, capsys):
    assert cl.main(["--run", "sb-s18", "--out", str(tmp_path), "--control", control]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + message) and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_control_is_an_archetype_or_knobs_over_the_baseline():
    base = cl.baseline(120.0)
    assert cl.control_config("fair-share heavy", base) == {**base, **cl.ARCHETYPES["fair-share heavy"]}
    got = cl.control_config("bf_max_job_test=1, bf_interval=5", base)
    assert got == {**base, "bf_max_job_test": 1, "bf_interval": 5}
    assert isinstance(got["bf_max_job_test"], int)


def test_a_garbage_trace_is_named_not_a_traceback(no_clusters, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("garbage\n\x00\x01\n")
    assert cl.main(["--run", "w1", "--out", str(tmp_path / "out"), "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --trace {bad}: ") and err.count("\n") == 1, err


def test_an_existing_run_is_never_overwritten(no_clusters, tmp_path, capsys):
    (tmp_path / "w1").mkdir()
    (tmp_path / "w1" / "run.json").write_text("{}")
    assert cl.main(["--run", "w1", "--out", str(tmp_path)]) == 2
    assert "holds a run already" in capsys.readouterr().err


def test_a_window_without_jobs_is_refused_before_the_clusters_start(no_clusters, tmp_path, capsys):
    # the bundled sample spans 28 days: day 100 has no job
    assert cl.main(["--run", "w1", "--out", str(tmp_path), "--start-day", "100"]) == 2
    assert "no job of at most 8 GPUs in days 100-102.5" in capsys.readouterr().err


@pytest.fixture
def doc_copy(tmp_path, monkeypatch):
    doc = tmp_path / "closed-loop.md"
    doc.write_text(cl.DOC.read_text())
    monkeypatch.setattr(cl, "DOC", doc)
    monkeypatch.setattr(cl, "PLOT", tmp_path / "plot.png")
    return doc


@pytest.mark.parametrize("where, message", [
    ("missing", "no such directory"), ("empty", "no run in it")])
def test_analyse_of_a_wrong_out_leaves_the_doc_alone(where, message, doc_copy, tmp_path, capsys):
    before = doc_copy.read_text()
    out = tmp_path / where
    if where == "empty":
        out.mkdir()
    assert cl.main(["--analyse", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"error: --out {out}: {message}" + (
        " (a run is a directory with a run.json)\n" if where == "empty" else "\n")
    assert doc_copy.read_text() == before and not (tmp_path / "plot.png").exists()


@pytest.mark.parametrize("info, message", [
    ({"plan": {}, "baseline": {}, "fraction": 1, "offered_load": 1}, "no 't0': the run did not finish"),
    ({"plan": {}, "baseline": {}, "t0": 1, "fraction": 1, "offered_load": 1, "failed": "RuntimeError: x"},
     "the run failed (RuntimeError: x)"),
])
def test_analyse_names_an_unfinished_run(info, message, doc_copy, tmp_path, capsys):
    before = doc_copy.read_text()
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.json").write_text(json.dumps(info))
    assert cl.main(["--analyse", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'r' / 'run.json'}: {message}") and err.count("\n") == 1
    assert doc_copy.read_text() == before


# -- on two real clusters -------------------------------------------------------------------

@pytest.mark.slurm
@pytest.mark.parametrize("name", ["ci", "ci-loop"])
def test_ci_run_on_two_real_clusters_accounts_for_every_job(name, tmp_path):
    # the "ci" plan: a crossover of 4 blocks on two real clusters, about 80 jobs, the agent's one
    # round first; "ci-loop": the agent's loop through the window, arm 1 what it runs at each
    # block's start. It checks the harness and that every job is accounted for, not the gain
    reason = missing_slurm()
    if reason:
        unavailable(reason)
    bases = free_port_bases(os.environ.get("PYTEST_XDIST_WORKER", "master"))
    base_a = next(bases)
    base_b = next(b for b in bases if b != base_a)
    # short roots under /tmp (socket paths < 108 bytes; pytest's tmp dirs are mode 0700)
    roots = tuple(Path(tempfile.mkdtemp(prefix=f"astb-{x}", dir="/tmp")) for x in "AB")
    for r in roots:
        r.chmod(0o755)
    out = tmp_path / name
    plan = cl.PLANS[name]
    trace, _ = load_trace(Path(plan.trace))
    t = time.monotonic()
    try:
        info = cl.run_blocks(plan, out, roots, (base_a, base_b), trace, log=print)
        print(f"ci run: {time.monotonic() - t:.0f} s wall ({info['wall_run']:.0f} s of jobs)")
        for r in roots:  # every daemon of both clusters is stopped (status exits 3)
            env = dict(os.environ, TESTBED_ROOT=str(r))
            assert subprocess.run(["bash", str(SCRIPT), "status"], env=env, capture_output=True,
                                  timeout=60).returncode == 3
    finally:
        if not os.environ.get("AUTOSCHED_TESTBED_KEEP"):
            for r in roots:
                shutil.rmtree(r, ignore_errors=True)
    jobs = cl.read_jobs(out / "jobs.csv")
    assert 60 <= len(jobs) <= 110 and info["submit_errors"] == [] and "failed" not in info
    assert 0.2 <= info["offered_load"] <= 0.6
    names = {j.name for j in jobs}
    gpus = {j.name: j.gpus for j in jobs}
    for label in "AB":
        rows = [r for r in cl.read_sacct(out / f"sacct-{label}.txt") if r["JobName"] in names]
        assert {r["JobName"] for r in rows} == names, f"cluster {label} lost jobs"
        assert {r["State"] for r in rows} == {"COMPLETED"}
        assert all(cl.node_of(r["NodeList"]) in range(4) for r in rows)
        # each job got the CPUs the plan's DefCpuPerGPU gives, and its row reads as the harness
        # writes the seed history's (sacct_row)
        for r in rows:
            job = next(j for j in jobs if j.name == r["JobName"])
            assert r["NCPUS"] == str(max(1, gpus[r["JobName"]] * plan.def_cpu_per_gpu)), r
            assert r["AllocTRES"] == dict(zip(cl.SACCT_FIELDS, cl.sacct_row(
                0, job, 0.0, 1.0, 2.0, plan.def_cpu_per_gpu).split("|")))["AllocTRES"], r
    # the schedule as recorded: each block's switch on each cluster, to its arm, on time
    sched = sb.Schedule.from_dict(info["schedule"])
    assert (sched.design, sched.blocks, sched.units) == ("crossover", 4, 2)
    block = info["lengths"]["block"]
    assert sorted((s["block"], s["unit"], s["arm"]) for s in info["switches"]) == [
        (k, u, int(sched.arms[k, u])) for k in range(4) for u in range(2)]
    for s in info["switches"]:
        assert 0 <= s["at"] - (info["t0"] + s["block"] * block) < 5
    # the agent's round(s): its baseline revision is the config the harness wrote, with --max-step 1
    status = json.loads((out / "agent-status.json").read_text())
    assert any(r["trigger"] == "baseline" for r in status["history"])
    if plan.in_window:  # its loop's log, and arm 1 in each block the config it ran then
        assert (out / "agent.log").exists() and status["last_round"]["trigger"]
        assert len(info["arm1"]) == 4 and info["arm1"][-1] == info["configs"][1]
        assert all(s["config"] == (info["arm1"][s["block"]] if s["arm"] else info["configs"][0])
                   for s in info["switches"])
    else:
        assert json.loads((out / "agent-step.json").read_text())
    settings = json.loads((out / "agent-settings.json").read_text())
    assert settings["time_scale"] == plan.scale and settings["max_step"] == 1.0
    assert (out / "seed.sacct").read_text().count("\n") > plan.min_jobs
    assert info["configs"][0] == cl.baseline(plan.scale) and info["configs"][1] == info["decision"]["config"]
    # the analysis: every block of both clusters, the measured jobs those submitted after a washout
    res = cl.analyse_block_run(out, jitters=1)
    assert {k: (a.submitted, a.recorded, a.completed) for k, a in res.accounted.items()} == {
        "A": (len(jobs), len(jobs), len(jobs)), "B": (len(jobs), len(jobs), len(jobs))}
    assert len(res.rows) == 8
    submit = np.array([j.submit for j in jobs])
    for u in range(2):  # a job is submitted when planned, give or take sbatch's latency
        measured = sum(r.realized.jobs for r in res.rows if r.unit == u)
        want = sum(int(((submit >= k * block + block / 2) & (submit < (k + 1) * block)).sum()) for k in range(4))
        assert abs(measured - want) <= 3, (u, measured, want)
    assert all(0 < t <= 1 for t in res.tau.values())
