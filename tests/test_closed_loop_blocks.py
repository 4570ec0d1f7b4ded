"""benchmarks/closed_loop_blocks.py: the block designs' lengths, the twin's replay of a block from
its real starting state, and the targets in words. Tiny inputs worked out by hand; the replay
checked against a run the twin itself played (it must give that run back exactly)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from autosched import switchback as sb
from autosched.errors import InputError
from autosched.trace.table import Trace
from conftest import script_module

cb = script_module("benchmarks/closed_loop_blocks.py")
cl = script_module("benchmarks/closed_loop.py")
tw = script_module("benchmarks/slurm_twin.py")


def _job(k, submit, gpus, seconds, user="alice", account="physics"):
    return tw.Job(f"cl-{k:04d}", float(submit), gpus, seconds, max(1, math.ceil((seconds + 5) / 60)), user, account)


# -- lengths --------------------------------------------------------------------------------

def test_release_and_lengths_by_hand():
    # 1 GPU for 10 s and 2 GPUs for 40 s: 90 GPU-seconds held on average; within 5 s the jobs
    # met at a random instant release (1 x 5 + 2 x 5) / 90, within 20 s (10 + 2 x 20) / 90
    jobs = [_job(0, 0, 1, 10), _job(1, 0, 2, 40)]
    assert cb.release(jobs, 5) == pytest.approx(15 / 90)
    assert cb.release(jobs, 20) == pytest.approx(50 / 90)
    # half is released at t with (10 + 2 t) / 90 = 1/2: t = 17.5; 12 blocks of a 1200 s run are
    # 100 s, the washout half of one, in which all of it is released
    lens = cb.lengths(jobs, 1200.0)
    assert (lens.blocks, lens.block, lens.washout) == (12, 100.0, 50.0)
    assert lens.half_release == pytest.approx(17.5) and lens.released == pytest.approx(1.0)
    assert "12 blocks of 100 s (3.3 trace h)" in lens.why(120.0)
    with pytest.raises(InputError, match="an even number"):
        cb.lengths(jobs, 1200.0, blocks=5)
    # one block (a crossover by run): the whole run, nothing left out
    whole = cb.lengths(jobs, 1200.0, blocks=1)
    assert (whole.blocks, whole.block, whole.washout, whole.released) == (1, 1200.0, 0.0, 0.0)
    assert whole.why(120.0).startswith("one block, the whole window (1200 s, 40.0 trace h), nothing left out")
    with pytest.raises(InputError, match="no job"):
        cb.lengths([], 1200.0)


def test_the_timeline_by_hand():
    s = sb.Schedule("crossover", 0, np.array([[1, 0], [0, 1]]))
    a, b = {"x": 0}, {"x": 1}
    tl = cb.Timeline(100.0, 40.0, s, (a, b))
    assert tl.bounds(1) == (100.0, 140.0, 200.0)
    assert tl.config(0, 0) == b and tl.config(0, 1) == a
    assert tl.switches(1) == [(0.0, a), (100.0, b)]



def test_arm_1_changes_block_by_block_when_the_agents_loop_ran_through_the_window():
    # an agent that changed its config at block 1: arm 1 is b in block 0 and c from block 1 on;
    # arm 0 stays a
    s = sb.Schedule("switchback", 0, np.array([[1], [0], [1]]))
    a, b, c = {"x": 0}, {"x": 1}, {"x": 2}
    tl = cb.Timeline(100.0, 40.0, s, (a, c), arm1=(b, c, c))
    assert [tl.arm_config(k, 1) for k in range(3)] == [b, c, c]
    assert [tl.arm_config(k, 0) for k in range(3)] == [a, a, a]
    assert tl.switches(0) == [(0.0, b), (100.0, a), (200.0, c)]


def test_a_block_replayed_under_a_changing_arm_1_gives_back_what_happened():
    # as below, with arm 1 the baseline in the first two blocks (an agent that had changed
    # nothing yet) and GPU first from then on: a replay under the config in force is the run
    base = cl.baseline(120.0)
    other = {**base, **cl.ARCHETYPES["GPU first"]}
    sched = sb.schedule("switchback", 6, 3)
    tl = cb.Timeline(100.0, 50.0, sched, (base, other), arm1=(base, base, other, other, other, other))
    spec = cb.testbed_spec()
    run = cb.simulate_run(_workload(), spec, tl, 0)
    for r in cb.block_rows([run], spec, tl):
        same = r.twin[r.arm]
        assert same.avg_jct == pytest.approx(r.realized.avg_jct, abs=1e-6)
        if r.block < 2:  # both arms the baseline: the replays agree
            assert r.twin[0].avg_jct == pytest.approx(r.twin[1].avg_jct, abs=1e-6)


def test_a_replay_is_computed_once_for_configs_that_schedule_alike(monkeypatch):
    # an A/A timeline of 4 blocks on one cluster: each block's two arms and its jittered copy
    # under the baseline are 2 distinct replays, not 3; a second call with GPU first as arm 1
    # and the same memo adds only GPU first's 4, and its arm 0 figures are the first call's
    base = cl.baseline(120.0)
    sched = sb.schedule("switchback", 4, 0)
    spec = cb.testbed_spec()
    aa = cb.Timeline(150.0, 75.0, sched, (base, dict(base)))
    run = cb.simulate_run(_workload(), spec, aa, 0)
    calls = []
    replay = cb.replay_block
    monkeypatch.setattr(cb, "replay_block", lambda *a, **k: calls.append(a[5]) or replay(*a, **k))
    memo: dict = {}
    rows = cb.block_rows([run], spec, aa, jitters=1, memo=memo)
    assert len(calls) == 4 * 2
    assert all(r.twin[0] == r.twin[1] for r in rows)
    gpu = cb.Timeline(150.0, 75.0, sched, (base, {**base, **cl.ARCHETYPES["GPU first"]}))
    again = cb.block_rows([run], spec, gpu, memo=memo)
    assert len(calls) == 4 * 2 + 4
    assert [r.twin[0] for r in again] == [r.twin[0] for r in rows]
    monkeypatch.undo()
    assert again == cb.block_rows([run], spec, gpu)  # the memo changes no figure
    shorter = cb.Timeline(100.0, 50.0, sched, (base, dict(base)))  # other bounds: other replays
    assert cb.block_rows([run], spec, shorter, memo=memo) == cb.block_rows([run], spec, shorter)


# -- the replay from a block's real starting state --------------------------------------------

def _run(submit, start, end, gpus, nodes, seconds=None) -> "cb.UnitRun":
    n = len(submit)
    trace = Trace.from_columns({
        "job_id": np.arange(n), "submit_time": np.array(submit, float),
        "num_gpus": np.array(gpus), "duration": np.array(end, float) - np.array(start, float),
        "time_limit": np.full(n, 600.0), "user": ["alice"] * n, "account": ["physics"] * n})
    real = tw.RealRun(trace, [], list(range(n)), np.array(submit, float), np.array(start, float),
                      np.array(end, float), 0.0, None, False)
    return cb.UnitRun(real, 0.0, [(0.0, cl.baseline(120.0))], np.array(nodes))


def test_the_block_trace_by_hand():
    # a: ran 0-50 on node 1; b: submitted at 5, ran 20-30 on node 0; c: submitted at 10, queued
    # until 60; d: submitted at 70. From t = 25: a and b arrive at their real starts, held to
    # their nodes; c arrives at 25, 15 s old; d when it really came
    run = _run([0, 5, 10, 70], [0, 20, 60, 70], [50, 30, 70, 80], [2, 1, 4, 1], [1, 0, 2, 3])
    trace, order = cb.block_trace(run, 25.0)
    assert order.tolist() == [0, 1, 2, 3]
    assert trace.submit_time.tolist() == [0.0, 20.0, 25.0, 70.0]
    assert trace.age.tolist() == [0.0, 0.0, 15.0, 0.0]
    assert trace.partition.tolist() == ["pin-1", "pin-0", "gpu", "gpu"]
    assert trace.duration.tolist() == [50.0, 10.0, 10.0, 10.0]
    # without its node on record, a job that ran goes wherever the twin places it
    run.nodes[0] = -1
    assert cb.block_trace(run, 25.0)[0].partition.tolist() == ["gpu", "pin-0", "gpu", "gpu"]
    # a jittered copy moves the arrivals from the block's start on (c and d), never a job that ran
    jit = cb.block_trace(run, 25.0, copy=1)[0].submit_time
    assert jit[:2].tolist() == [0.0, 20.0] and (0 < jit[2:] - [25.0, 70.0]).all() and (jit[2:] - [25.0, 70.0] < 0.5).all()


def _workload(n=300, seed=0):
    rng = np.random.default_rng(seed)
    jobs = []
    for k in range(n):
        jobs.append(_job(k, round(float(rng.uniform(0, 600)), 2), int(rng.choice([1, 2, 4, 8])),
                         int(rng.integers(1, 60)), user=str(rng.choice(tw.USERS)),
                         account=str(rng.choice(tw.ACCOUNTS))))
    return cb.window_trace(jobs)


def test_the_twin_sizes_a_job_as_the_test_cluster_does():
    # scripts/slurm/slurm.conf.in gives a node CPUs=8 beside gpu:8 and sets DefCpuPerGPU only from
    # TESTBED_DEF_CPU_PER_GPU, and the harness submits `sbatch --gres=gpu:N` with no CPU count:
    # without it Slurm gives every job one task of one CPU, so a 1-, 4- and 8-GPU job are one CPU
    # each; with DefCpuPerGPU=1 they are 1, 4 and 8, the node shape's
    conf = (tw.REPO / "scripts" / "slurm" / "slurm.conf.in").read_text()
    assert "CPUs=8 " in conf and "Gres=gpu:8 " in conf and "\nDefCpuPerGPU" not in conf
    assert "\n@JOB_DEFAULTS@\n" in conf
    for spec in (cb.testbed_spec(), tw.testbed_cluster()):
        assert (spec.nodes, spec.gpus_per_node, spec.cpus_per_node) == (4, 8, 8)
        assert spec.job_cpus(np.array([1, 4, 8]), None).tolist() == [1, 1, 1]
        # a job whose CPUs sacct gave keeps them
        assert spec.job_cpus(np.array([1, 4]), np.array([2.0, 0.0])).tolist() == [2, 1]
    for spec in (cb.testbed_spec(def_cpu_per_gpu=1), tw.testbed_cluster(1)):
        assert spec.job_cpus(np.array([1, 4, 8]), None).tolist() == [1, 4, 8]


def test_a_block_replayed_under_its_own_config_gives_back_what_happened():
    # the twin plays a switchback of 6 blocks (the pseudo-real run), then every block is replayed
    # from that run's state at its start: under the config that ran, the replay must be the run
    base = cl.baseline(120.0)
    other = {**base, **cl.ARCHETYPES["GPU first"]}
    trace = _workload()
    spec = cb.testbed_spec()
    tl = cb.Timeline(100.0, 50.0, sb.schedule("switchback", 6, 3), (base, other))
    run = cb.simulate_run(trace, spec, tl, 0, copy=1, seed=2)
    assert (run.nodes >= 0).all()
    rows = cb.block_rows([run], spec, tl)
    assert [r.arm for r in rows] == tl.schedule.arms[:, 0].tolist()
    for r in rows:
        same = r.twin[r.arm]
        assert same.jobs == r.realized.jobs > 0
        assert same.avg_jct == pytest.approx(r.realized.avg_jct, abs=1e-6)
        assert same.avg_wait == pytest.approx(r.realized.avg_wait, abs=1e-6)
    # the run is busy enough that the other config changes some block
    assert any(abs(r.twin[1 - r.arm].avg_jct - r.realized.avg_jct) > 0.1 for r in rows)


def test_a_crossover_by_run_measures_every_job_of_the_window_on_both_clusters():
    # the twin plays both clusters of a crossover by run (one block, no washout), and the block is
    # replayed from the empty cluster the window starts on: every job is measured, on each
    # cluster under its own config, and the replay under that config gives the run back
    base = cl.baseline(120.0)
    other = {**base, **cl.ARCHETYPES["GPU first"]}
    trace = _workload()
    spec = cb.testbed_spec()
    tl = cb.Timeline(600.0, 0.0, sb.schedule("crossover-by-run", 1, 5), (base, other))
    runs = [cb.simulate_run(trace, spec, tl, u) for u in (0, 1)]
    rows = cb.block_rows(runs, spec, tl)
    assert [(r.block, r.unit, r.arm) for r in rows] == [(0, u, int(tl.schedule.arms[0, u])) for u in (0, 1)]
    for r in rows:
        assert r.realized.jobs == len(trace)
        assert r.twin[r.arm].avg_jct == pytest.approx(r.realized.avg_jct, abs=1e-6)
    # the two clusters ran the two configs on the same jobs
    assert rows[0].twin == rows[1].twin


def test_each_runs_gain_in_a_crossover_by_run_and_its_panel(tmp_path):
    # run 0: cluster A on arm 1 at 150 s, B on arm 0 at 200 s (the twin: 190 and 210 s);
    # run 1: A on arm 0 at 100 s, B on arm 1 at 90 s (the twin: 100 and 80 s)
    f = cb.Figures
    runs = []
    for k, (arms, real, twin) in enumerate([((1, 0), (150.0, 200.0), (210.0, 190.0)),
                                            ((0, 1), (100.0, 90.0), (100.0, 80.0))]):
        rows = [cb.BlockRow(0, u, a, f(10, y, 1.0), (f(10, twin[0], 1.0), f(10, twin[1], 1.0)))
                for u, (a, y) in enumerate(zip(arms, real))]
        r = _result(f"r{k}", 0.1, 0.0, 0.2, predicted=0.2, trace="w")
        r.rows, r.schedule = rows, sb.Schedule("crossover-by-run", k, np.array([list(arms)]))
        r.plan, r.configs = dict(r.plan, design="crossover-by-run"), ({}, {"x": 1})
        runs.append(r)
    (x,) = cb.pool(runs)
    real, twin = cb.run_gains(x)
    assert real.tolist() == pytest.approx([1 - 150 / 200, 1 - 90 / 100])
    assert twin.tolist() == pytest.approx([1 - 190 / 210, 1 - 80 / 100])
    assert cb.by_run(x)
    path = tmp_path / "p.png"
    cb.draw(runs, path)  # one panel for the two runs
    assert path.stat().st_size > 1000


def test_twin_block_gain_and_blocks_of_by_hand():
    f = cb.Figures
    rows = [cb.BlockRow(0, 0, 1, f(2, 10.0, 4.0), (f(2, 12.0, 5.0), f(2, 10.0, 4.0))),
            cb.BlockRow(1, 0, 0, f(1, 20.0, 9.0), (f(1, 20.0, 9.0), f(1, 14.0, 6.0))),
            cb.BlockRow(2, 0, 0, cb.NO_JOBS, (cb.NO_JOBS, cb.NO_JOBS)),
            cb.BlockRow(3, 0, 1, f(3, 8.0, 2.0), (f(3, 9.0, 2.0), f(3, 8.0, 2.0)))]
    # job-weighted: arm 1 (2 x 10 + 14 + 3 x 8) = 58, arm 0 (2 x 12 + 20 + 3 x 9) = 71
    assert cb.twin_block_gain(rows) == pytest.approx(1 - 58 / 71)
    b = cb.blocks_of(rows, sb.Schedule("switchback", 0, np.array([[1], [0], [0], [1]])), "avg_wait")
    assert b.jobs.tolist() == [2, 1, 0, 3] and b.realized.tolist() == [4.0, 9.0, 0.0, 2.0]
    assert b.twin.tolist() == [[5.0, 4.0], [9.0, 6.0], [0.0, 0.0], [2.0, 2.0]]


# -- a round's own period ---------------------------------------------------------------------

def test_the_jobs_a_round_predicts_for_by_hand():
    submit = np.array([0.0, 5.0, 10.0, 20.0, 40.0])
    start = np.array([1.0, 12.0, 10.0, 25.0, 41.0])
    # at 10 with a period of 20: job 1 is queued (started at 12), jobs 2 and 3 are submitted in
    # [10, 30); job 0 runs already and job 4 comes after the period
    assert cb.judged_at(submit, start, 10.0, 20.0).tolist() == [False, True, True, True, False]


def test_the_twins_gain_over_a_rounds_period_by_hand():
    # 32 GPUs: a 32-GPU job runs 0-100; queued behind it another (submitted at 10, 100 s) and
    # four 8-GPU jobs (at 20, 50 s). The baseline's GPU TRES weight starts the big one first:
    # 100-200, the four 200-250. Small first, switched in at 50, starts the four at 100 (to
    # 150), the big one 150-250. Timed from the round at 50: (150 + 4 x 200) / 5 = 190 against
    # (200 + 4 x 100) / 5 = 120
    jobs = [_job(0, 0, 32, 100), _job(1, 10, 32, 100)] + [_job(2 + i, 20, 8, 50) for i in range(4)]
    trace, spec = cb.window_trace(jobs), cb.testbed_spec()
    base = cl.baseline(120.0)
    small = {**base, "PriorityFavorSmall": True, "PriorityWeightTRES.GRES/gpu": 0}
    assert cb.round_gain(trace, spec, base, small, 50.0, 720.0) == pytest.approx(1 - 120 / 190)
    assert cb.round_gain(trace, spec, base, base, 50.0, 720.0) == 0.0
    assert math.isnan(cb.round_gain(trace, spec, base, small, 5000.0, 720.0))  # nothing left to predict for


# -- the agent's decision, and the targets --------------------------------------------------

def test_the_decision_an_agent_status_records():
    base = {"PriorityWeightAge": 1000, "bf_window": 12}
    status = {"running": {"id": 2, "config": {"PriorityWeightAge": 5000}},
              "last_round": {"why": "applied"},
              "history": [{"id": 2, "trigger": "period", "parent": 1, "diff": {"PriorityWeightAge": [1000, 5000]},
                           "evidence": {"predicted_gain": 0.12, "spread": 0.01}},
                          {"id": 1, "trigger": "baseline", "parent": None, "diff": {}, "evidence": {}}]}
    d = cl.decision_of(status, base)
    assert d.config == {"PriorityWeightAge": 5000, "bf_window": 12}
    assert (d.revision, d.diff, d.predicted_gain, d.spread) == (2, {"PriorityWeightAge": [1000, 5000]}, 0.12, 0.01)
    none = cl.decision_of({"running": {"id": 1, "config": {}}, "last_round": {"why": "within noise"},
                           "history": status["history"]}, base)
    assert (none.config, none.revision, none.why) == (base, None, "within noise")


def test_a_loops_decision_is_its_last_change_even_when_rolled_back():
    base = {"PriorityFavorSmall": False, "bf_window": 12}
    history = [{"id": 3, "kind": "rollback", "parent": 2, "applied_at": 30.0, "config": {"PriorityFavorSmall": False},
                "diff": {"PriorityFavorSmall": [True, False]}, "evidence": {}},
               {"id": 2, "kind": "proposal", "parent": 1, "applied_at": 20.0, "config": {"PriorityFavorSmall": True},
                "diff": {"PriorityFavorSmall": [False, True]}, "evidence": {"predicted_gain": 0.087, "spread": 0.026}},
               {"id": 1, "kind": "baseline", "parent": None, "applied_at": 10.0, "config": {}, "diff": {}, "evidence": {}}]
    status = {"running": {"id": 3, "config": {"PriorityFavorSmall": False}}, "last_round": {"why": "kept"},
              "history": history}
    d = cl.loop_decision(status, base)
    assert (d.revision, d.config, d.predicted_gain) == (2, {"PriorityFavorSmall": True, "bf_window": 12}, 0.087)
    assert cl.decision_of(status, base).revision == 3  # what the running revision alone says
    # a proposal never applied is no decision; without a change, the baseline
    unapplied = [dict(history[1], applied_at=None), history[2]]
    none = cl.loop_decision({"running": {"id": 1, "config": {}}, "last_round": {"why": "none"},
                             "history": unapplied}, base)
    assert (none.revision, none.config) == (None, base)


def test_node_of():
    assert [cl.node_of(x) for x in ("n1", "n4", " n2 ", "n[1-2]", "", "None")] == [0, 3, 1, -1, -1, -1]


def _result(name, gain, lo, hi, aa=False, predicted=None, lost=0, arm1=(), trace=None):
    e = sb.Effect("twin", "twin", math.log(1 - gain), math.log(1 - hi), math.log(1 - lo), 0.5, 64, True, 6, 1.0, 1.0)
    decision = None if aa else {"revision": 2 if predicted is not None else None, "predicted_gain": predicted,
                                "diff": {}, "why": ""}
    plan = {"aa": aa, "design": "switchback", "start_day": 1, "days": 1, "trace": f"/x/{trace or name}.csv"}
    return cb.BlockResult(name, plan, 10, 0.9,
                          cb.Lengths(12, 100.0, 50.0, 20.0, 0.8), sb.schedule("switchback", 12, 0),
                          {"A": cb.Accounted(10, 10 - lost, 10 - lost)}, [],
                          {"avg_jct": {cb.ESTIMATES[0]: e}, "avg_wait": {cb.ESTIMATES[0]: e}},
                          {"avg_jct": 0.1, "avg_wait": 0.1}, 0.1, [], {"A": 0.99}, decision, None, None,
                          ({}, {"run": name}), {}, arm1)  # each its own experiment


def test_the_targets_in_words():
    res = [_result("aa", 0.01, -0.04, 0.06, aa=True), _result("w1", 0.12, 0.05, 0.19, predicted=0.20),
           _result("w2", 0.08, 0.01, 0.15, predicted=0.30), _result("w3", 0.02, -0.05, 0.09, predicted=None)]
    lines = cb.targets(res)
    assert lines[0] == "no job lost: met (every submitted job is in sacct)"
    assert lines[1] == ("A/A (aa): the 95% CI of the gain in average JCT [-4.0%, +6.0%] contains 0 — met; its "
                        "half-width, the design's resolution on this machine: 5.0%")
    assert lines[2] == ("the agent's config: the CI excludes 0 on the side of improvement on 2 window(s) (w1, w2), "
                        "on the side of harm on none — met")
    # w1: 0.20 / 0.12 is within 2; w2: 0.30 / 0.08 is not; w3 made no change
    assert lines[3] == ("prediction within a factor of 2 of the realized gain on each window with a change: "
                        "not met on w2 (predicted +30.0%, realized +8.0%)")
    worse = cb.targets([_result("w1", 0.12, 0.05, 0.19, predicted=0.2), _result("w2", -0.1, -0.2, -0.01, predicted=0.1),
                        _result("aa", 0.0, 0.01, 0.05, aa=True, lost=1)])
    assert worse[0] == "no job lost: NOT met: aa A: 1"
    assert worse[1].endswith("excludes 0 — NOT met; its half-width, the design's resolution on this machine: 2.0%")
    assert worse[2].endswith("on 1 window(s) (w1), on the side of harm on w2 — not met")
    # two experiments on one window (by block, by run) are one window
    same = cb.targets([_result("w1", 0.12, 0.05, 0.19, predicted=0.2),
                       _result("w1-by-run", 0.2, 0.1, 0.3, predicted=0.2, trace="w1")])
    assert same[2] == ("the agent's config: the CI excludes 0 on the side of improvement on 1 window(s) "
                       "(w1, w1-by-run), on the side of harm on none — not met")


def test_a_run_whose_arms_differ_in_few_blocks_is_not_judged():
    """An agent that changed the config in its run's last block: 1 of 12 blocks has the arms
    apart, under half, so its interval (here one that excludes 0 on the side of harm) is listed
    apart, not read as a harm, and its prediction is not compared. Held in 6 of 12 blocks it is
    judged."""
    late = _result("late", -0.004, -0.026, -0.0001, predicted=0.185, arm1=({},) * 11 + ({"run": "late"},))
    assert late.apart == 1
    lines = cb.targets([late])
    assert lines[2] == ("the agent's config: the CI excludes 0 on the side of improvement on 0 window(s), on the "
                        "side of harm on none; too few blocks with the arms apart to judge: late (1 of 12) — not met")
    assert lines[3] == ("prediction within a factor of 2 of the realized gain on each window with a change: "
                        "no window with a change the design can judge yet")
    # a run records arm 1 whole and its baseline with the knobs it sets: Slurm's default
    # bf_max_job_test (500) written out is the same config, another value is not
    whole = {"bf_max_job_test": 500, "bf_continue": False}
    assert cb.same_config({}, whole) and not cb.same_config({}, {**whole, "bf_max_job_test": 1000})
    assert _result("w", 0, -0.1, 0.1, predicted=0.1, arm1=(whole,) * 11 + ({"run": "w"},)).apart == 1
    half = _result("half", -0.004, -0.026, -0.0001, predicted=0.185, arm1=({},) * 6 + ({"run": "half"},) * 6)
    assert half.apart == 6
    assert cb.targets([half])[2].endswith("on the side of harm on half — not met")


def _rows(arms, jct, twin0, twin1, jobs=10):
    f = cb.Figures
    return [cb.BlockRow(k, 0, a, f(jobs, y, y / 2), (f(jobs, p0, 1.0), f(jobs, p1, 1.0)))
            for k, (a, y, p0, p1) in enumerate(zip(arms, jct, twin0, twin1))]


def _run_result(name, seed, jct, twin0, twin1, configs=({"x": 0}, {"x": 1}), aa=False):
    sched = sb.schedule("switchback", len(jct), seed)
    rows = _rows(sched.arms[:, 0].tolist(), jct, twin0, twin1)
    res = _result(name, 0.0, -0.1, 0.1, aa=aa)
    res.schedule, res.rows, res.configs = sched, rows, configs
    res.plan = dict(res.plan, trace="/x/t.csv", start_day=18.0)
    return res


def test_replicate_runs_are_read_together():
    rng = np.random.default_rng(0)
    a = _run_result("w", 0, *(rng.uniform(10, 50, (3, 12))))
    b = _run_result("w-2", 1, *(rng.uniform(10, 50, (3, 12))))
    other = _run_result("v", 2, *(rng.uniform(10, 50, (3, 12))), configs=({"x": 0}, {"x": 2}))
    groups = cb.pool([a, other, b])
    assert [[r.name for r in g.runs] for g in groups] == [["w", "w-2"], ["v"]]
    x = groups[0]
    assert x.name == "w + w-2"
    bl = x.blocks("avg_jct")
    # the second run's 6 pairs come after the first's, its blocks as they were
    assert bl.pair.tolist() == [k // 2 for k in range(24)]
    assert bl.arm.tolist() == a.schedule.arms[:, 0].tolist() + b.schedule.arms[:, 0].tolist()
    assert bl.realized[12:].tolist() == [r.realized.avg_jct for r in b.rows]
    e = x.main()
    assert e.pairs == 12 and e.assignments == 4096
    assert e.estimate == pytest.approx(sb.effect(bl).estimate)
    # one run alone reads its own effect
    assert groups[1].main() is other.main()


def test_the_targets_read_replicates_together():
    rng = np.random.default_rng(1)
    y = rng.uniform(20, 40, 12)
    a = _run_result("aa", 0, y, y, y, configs=({"x": 0}, {"x": 0}), aa=True)
    b = _run_result("aa-2", 3, y * 1.01, y, y, configs=({"x": 0}, {"x": 0}), aa=True)
    lines = cb.targets([a, b])
    e = cb.pool([a, b])[0].main()
    g, lo, hi = e.gain()
    assert lines[1] == (f"A/A (aa + aa-2): the 95% CI of the gain in average JCT [{cb.pct(lo)}, {cb.pct(hi)}] "
                        f"contains 0 — met; its half-width, the design's resolution on this machine: "
                        f"{(hi - lo) / 2:.1%}")


def test_a_replicate_takes_a_finished_runs_decision(tmp_path):
    plan = cl.PLANS["sb-s18"]
    with pytest.raises(InputError, match="no run of that name"):
        cl.check_decision(tmp_path / "nope", plan)
    (tmp_path / "aa").mkdir()
    (tmp_path / "aa" / "run.json").write_text(json.dumps(
        {"plan": vars(cl.PLANS["sb-aa"]), "baseline": {}, "t0": 1, "fraction": 1, "offered_load": 1}))
    with pytest.raises(InputError, match="holds no agent decision"):
        cl.check_decision(tmp_path / "aa", plan)
    info = {"plan": vars(cl.Plan("w", start_day=9.0, design="switchback")), "baseline": {}, "t0": 1,
            "fraction": 1, "offered_load": 1, "decision": {"config": {}}}
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "run.json").write_text(json.dumps(info))
    with pytest.raises(InputError, match="differs in start_day: a replicate runs the same window"):
        cl.check_decision(tmp_path / "w", plan)
    cl.check_decision(tmp_path / "w", cl.Plan("w-2", start_day=9.0, design="switchback", design_seed=1))
    # the decision, not the blocks: a crossover may measure a switchback's decision
    cl.check_decision(tmp_path / "w", cl.Plan("w-x", start_day=9.0, design="crossover", blocks=16))
    # the same trace from another checkout
    elsewhere = str(Path("/elsewhere") / Path(cl.Plan("w").trace).name)
    cl.check_decision(tmp_path / "w", cl.Plan("w-y", start_day=9.0, design="switchback", trace=elsewhere))
    with pytest.raises(InputError, match="only a block design"):
        cl.check_decision(tmp_path / "w", cl.PLANS["w1"])


def test_a_measuring_run_goes_on_only_after_a_change():
    kept = cl.Decision({}, None, {}, None, None, "gain +2.04% within noise")
    applied = cl.Decision({}, 2, {"bf_window": [12, 2172]}, 0.1, 0.01, "applied")
    assert not cl.measures(cl.PLANS["sb-s18"], kept)
    assert cl.measures(cl.PLANS["sb-s18"], applied)
    assert cl.measures(cl.PLANS["ci"], kept)  # it checks the harness, whatever the agent does


def test_an_unchanged_window_in_the_tables_and_the_targets(tmp_path):
    u = cb.Unchanged("s18", {"trace": "/x/sample.csv.gz", "start_day": 18.0, "days": 2.5}, 1667, 0.8876, 424,
                     "gain +2.04% within noise", "GPU first: +4.5% ± 4.2% on 4 samples, breaks the policy")
    lines = cb.render([], [u]).splitlines()
    assert ("| s18 | sample.csv.gz | 18-20.5 | 1667 | 0.89 | 424 | no change: gain +2.04% within noise | "
            "GPU first: +4.5% ± 4.2% on 4 samples, breaks the policy |") in lines
    assert lines[-2] == ("- the agent's config: the CI excludes 0 on the side of improvement on 0 window(s), on the "
                         "side of harm on none; no change on s18 — not met")
    assert lines[-1] == ("- prediction within a factor of 2 of the realized gain on each window with a change: "
                         "no window with a change yet")
    # a replicate of it would be an A/A run
    info = {"plan": vars(cl.PLANS["sb-s18"]), "baseline": {}, "t0": None, "fraction": 1, "offered_load": 1,
            "decision": {"config": {}, "revision": None}, "unchanged": True}
    (tmp_path / "sb-s18").mkdir()
    (tmp_path / "sb-s18" / "run.json").write_text(json.dumps(info))
    with pytest.raises(InputError, match="its agent changed nothing"):
        cl.check_decision(tmp_path / "sb-s18", cl.PLANS["sb-s18"])


def test_an_unchanged_run_read_from_its_files(tmp_path):
    # the round's portfolio: the best gain on the samples is GPU first's +4.5%; age only and small
    # first tie below it, and a candidate without a figure is left out
    portfolio = [{"name": "deep backfill", "gain": 0.0204, "se": 0.0175, "samples": 8, "dropped": ""},
                 {"name": "GPU first", "gain": 0.0453, "se": 0.0423, "samples": 4, "dropped": "breaks the policy"},
                 {"name": "age only", "gain": 0.0246, "se": 0.0325, "samples": 4, "dropped": "cannot reach the margin"},
                 {"name": "small first", "gain": 0.0246, "se": 0.0325, "samples": 4, "dropped": "scheduled as age only"},
                 {"name": "odd", "gain": None}]
    run = tmp_path / "sb-s18"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"plan": vars(cl.PLANS["sb-s18"]), "baseline": {}, "t0": None,
                                              "fraction": 0.2, "offered_load": 0.8876, "jobs": 1667,
                                              "unchanged": True}))
    (run / "agent-step.json").write_text(json.dumps({"why": "gain +2.04% within noise", "history_jobs": 424,
                                                     "evidence": {"leader": "deep backfill", "portfolio": portfolio}}))
    u = cl.unchanged_run(run)
    assert (u.name, u.jobs, u.history_jobs, u.why) == ("sb-s18", 1667, 424, "gain +2.04% within noise")
    assert u.best == "GPU first: +4.5% ± 4.2% on 4 samples, breaks the policy"
    (run / "agent-step.json").write_text("{}")
    with pytest.raises(InputError, match="agent-step.json: not the round's JSON"):
        cl.unchanged_run(run)


def test_a_positive_control_is_read_apart_from_the_agents_windows():
    # a control's interval 0.15 [0.05, 0.25] excludes 0; it counts for none of the agent's targets
    ctl = _result("c21", 0.15, 0.05, 0.25)
    ctl.plan = dict(ctl.plan, control="fair-share heavy")
    ctl.decision = None
    lines = cb.targets([_result("aa", 0.01, -0.04, 0.06, aa=True), ctl])
    assert lines[2] == ("control (c21, fair-share heavy; the twin's gain in the blocks +10.0%): "
                        "+15.0% [+5.0%, +25.0%], the CI excludes 0; no effect in any block: p 0.50")
    assert lines[3] == ("the agent's config: the CI excludes 0 on the side of improvement on 0 window(s), "
                        "on the side of harm on none — not met")
    ctl.effects = {m: {k: ctl.main() for k in cb.ESTIMATES} for m in ("avg_jct", "avg_wait")}
    assert "| control: fair-share heavy (no agent) | — |" in cb.render([ctl])


def test_what_an_archetype_could_show_in_an_aa_runs_blocks():
    aa = _result("aa", 0.01, -0.04, 0.06, aa=True)
    aa.effects = {m: {k: aa.main() for k in cb.ESTIMATES} for m in ("avg_jct", "avg_wait")}
    aa.archetypes = {"age only": 0.0192, "GPU first": -0.0286}
    lines = cb.render([aa]).splitlines()
    at = lines.index("| run | age only | GPU first |")
    assert lines[at + 1:at + 3] == ["|---|---|---|", "| aa | +1.9% | -2.9% |"]
    aa.archetypes = {}
    assert "| run | age only | GPU first |" not in cb.render([aa])



def test_a_crossover_reads_the_plain_estimate_and_a_switchback_the_twins():
    assert cb.primary("switchback") == ("twin", "twin")
    assert cb.primary("crossover") == cb.primary("crossover-by-block") == ("plain", "constant")
    effects = {k: sb.Effect(k[0], k[1], -0.1 * i, -0.2, 0.0, 0.5, 64, True, 6, 1.0, 1.0)
               for i, k in enumerate(cb.ESTIMATES)}
    r = _result("x", 0.1, 0.0, 0.2)
    r.effects = {"avg_jct": effects, "avg_wait": effects}
    assert r.main().estimator == "twin" and r.main().shape == "twin"
    r.plan = dict(r.plan, design="crossover-by-block")
    assert r.main() is effects[("plain", "constant")]


def test_small_p_values_keep_two_digits():
    assert [cb.pval(p) for p in (0.55, 0.0100, 0.0029296875, 1 / 4096)] == ["0.55", "0.01", "0.0029", "0.00024"]
