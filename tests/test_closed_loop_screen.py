"""benchmarks/closed_loop_screen.py: the shipped agent's own loop over a window, in the twin.

The fake cluster's sacct is checked on a tiny window worked out by hand; the loop is run over a
short window (the "ci" plan's small budget) and must run the agent's rounds inside the window at
its period, not only the one before it that the block runs had."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autosched.errors import InputError
from autosched.live.history import ACTIVE_STATES
from conftest import script_module

cl = script_module("benchmarks/closed_loop.py")
cs = script_module("benchmarks/closed_loop_screen.py")
tw = script_module("benchmarks/slurm_twin.py")
T0 = 1_700_000_000.0  # 2023-11-14T22:13:20 UTC


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(text.splitlines(), delimiter="|"))


def _cluster(tmp_path: Path, jobs: list) -> object:
    setup, live = cs.testbed_setup()
    cs.FakeConnector.create(tmp_path / "fake", base=live, setup=setup)
    return cs.TwinCluster(tmp_path / "fake", jobs, T0, cl.baseline(120.0))


def test_the_twin_clusters_sacct_is_the_window_as_it_stands_at_its_clock(tmp_path):
    # four 8-GPU jobs of 100 s at 0 fill the 32 GPUs; a fifth, at 1 s, waits for them (they end at
    # 100 s) and runs 10 s; a sixth is submitted at 300 s. At 50 s: four RUNNING, one PENDING
    # (no start, no GPUs allocated), the sixth not there; at 200 s: five COMPLETED.
    jobs = [tw.Job(f"cl-{i:04d}", 0.0, 8, 100, 2, "alice", "physics") for i in range(4)]
    jobs += [tw.Job("cl-0004", 1.0, 8, 10, 2, "bob", "chemistry"), tw.Job("cl-0005", 300.0, 1, 5, 1, "bob", "physics")]
    cluster = _cluster(tmp_path, jobs)
    cluster.elapsed = 50.0
    assert cluster.now() == T0 + 50
    rows = _rows(cluster.sacct_rows(T0 - 3600, T0 + 50))
    assert [r["JobName"] for r in rows] == [f"cl-{i:04d}" for i in range(5)]
    assert [r["JobID"] for r in rows] == ["1", "2", "3", "4", "5"]
    assert [r["State"] for r in rows] == ["RUNNING"] * 4 + ["PENDING"]
    assert {r["State"] for r in rows} <= set(ACTIVE_STATES)
    assert [r["End"] for r in rows] == ["Unknown"] * 5
    assert rows[4]["Start"] == "Unknown" and rows[4]["AllocTRES"] == "" and "gres/gpu=8" in rows[4]["ReqTRES"]
    assert rows[0]["Start"] == "2023-11-14T22:13:20" and rows[4]["Submit"] == "2023-11-14T22:13:21"
    cluster.elapsed = 200.0
    rows = _rows(cluster.sacct_rows(T0, T0 + 200))
    assert [r["State"] for r in rows] == ["COMPLETED"] * 5
    assert [r["End"] for r in rows[:4]] == ["2023-11-14T22:15:00"] * 4  # T0 + 100


def test_a_switch_runs_the_new_config_from_its_moment_on(tmp_path):
    # the cluster's jobs replayed under the baseline, then (from 50 s) under age only: the same
    # records as the twin's replay of those two configs with the switch at 50 s
    jobs = [tw.Job(f"cl-{i:04d}", float(i), 1 + i % 8, 30 + 7 * i, 2, cl.tw.USERS[i % 3], cl.tw.ACCOUNTS[i % 2])
            for i in range(60)]
    cluster = _cluster(tmp_path, jobs)
    base = cl.baseline(120.0)
    other = {**base, **cl.ARCHETYPES["age only"]}
    cluster.elapsed = 50.0
    cluster.switch(other)
    want = cs.cb.simulate(cluster.trace, cluster.spec, [(0.0, base), (50.0, other)]).records()
    got = cluster.records()
    assert np.array_equal(got.first_start, want.first_start) and np.array_equal(got.end, want.end)
    assert cluster.switches == [(0.0, base), (50.0, other)]


def test_the_agent_runs_its_rounds_inside_the_window_at_its_period(tmp_path):
    # a window of 2.5 periods (the "ci" plan's, whose queue never doubles past what a round saw):
    # `agent run`'s own loop rounds at 0, 1 and 2 periods in (the block runs had only the first);
    # the plan's small budget keeps it short
    plan = replace(cl.PLANS["ci"], days=2.5, design="switchback")
    trace = cl.trace_of(Path(plan.trace))
    sel = cl.select(trace, plan)
    rounds, cluster = cs.agent_rounds(plan, sel, tmp_path)
    assert [r.at for r in rounds] == [0.0, plan.day, 2 * plan.day]
    assert [r.trigger for r in rounds] == ["period"] * 3
    assert all(r.why for r in rounds)
    # every config it applied runs on the twin from its round on (none: the baseline throughout)
    changed = [r for r in rounds if r.diff]
    assert [t for t, _ in cluster.switches[1:]] == [r.at for r in changed]


def test_a_burst_inside_the_window_gets_a_round_at_the_next_poll(tmp_path):
    # the "ci" plan: a period of 60 s, polls every 30 s (`agent run`: a quarter period, at least
    # 30 s). 40 one-GPU jobs of 5 s in the window before (history for the model); in the window,
    # 60 jobs of 8 GPUs for 20 s at 24 s: 4 run, 56 wait at the poll at 30 s, against an empty
    # queue at the round at 0 (the trigger asks 2 x max(seen, 10 jobs) and 2 x max(seen, 1 h of
    # the 32 GPUs on the jobs' clock, 1440x faster) GPU-hours). The agent's own trigger asks at
    # every poll: a round there, then the period's a period later, at 90 s (the window ends at
    # 150 s); the queue the 30 s round saw (56) never doubles after.
    plan = replace(cl.PLANS["ci"], days=2.5, design="switchback")
    before = [tw.Job(f"cls-{i:04d}", -120.0 + 3 * i, 1, 5, 1, "alice", "physics") for i in range(40)]
    jobs = [tw.Job(f"cl-{i:04d}", 24.0, 8, 20, 1, tw.USERS[i % 3], tw.ACCOUNTS[i % 2]) for i in range(60)]
    sel = cl.Selection(jobs, before, 1.0, 1.0, 1.0)
    rounds, _ = cs.agent_rounds(plan, sel, tmp_path)
    assert [(r.at, r.trigger.split(":")[0]) for r in rounds] == [(0.0, "period"), (30.0, "contention"),
                                                                 (90.0, "period")]
    assert rounds[1].trigger.startswith("contention: queue 56 jobs")


def test_the_shadow_cluster_reads_the_cluster_and_keeps_the_agents_applies_apart(tmp_path):
    # the agent of a run with rounds in the window reads the real cluster's clock, jobs and setup
    # (here a fake in its place) but applies to its own fake: the cluster's settings stay the
    # harness's
    setup, live = cs.testbed_setup()
    real = cs.FakeConnector.create(tmp_path / "real", base=live, setup=setup,
                                   sacct="JobID|Submit|Start|End|AllocTRES\n7|x|x|x|gres/gpu=1\n")
    real.update(clock=T0 + 5)
    cs.FakeConnector.create(tmp_path / "own", base=live, setup=setup)
    shadow = cs.ShadowCluster(tmp_path / "own", real)
    assert shadow.now() == T0 + 5 and shadow.sacct_rows(T0, T0 + 5).startswith("JobID") and "\n7|" in \
        shadow.sacct_rows(T0, T0 + 5)
    assert shadow.setup() == setup
    shadow.apply({**live, "PriorityWeightAge": "5"})
    assert shadow.live_values()["PriorityWeightAge"] == "5"
    assert real.live_values() == live


@pytest.mark.parametrize("text", ["", "nan-3", "1-inf", "-2", "3,nan", "1-1e9", "a,b", "5-3",
                                  ",".join(["1"] * 1001)])
def test_days_refuses_what_is_no_list_of_trace_days(text):
    # a range beyond MAX_WINDOWS would build a billion-day list; NaN, infinity, negative days
    # and an empty range are no windows
    with pytest.raises(InputError, match="--days"):
        cs.days_of(text)


def test_days_reads_a_range_and_a_list():
    assert cs.days_of("41-43") == [41.0, 42.0, 43.0]
    assert cs.days_of("3,7.5") == [3.0, 7.5]


def test_the_calibration_of_the_first_changes_by_hand():
    def window(day, predicted, at_round):
        return cs.Screened(day, 10, 0.8, [], [(0.0, {}), (1.0, {})], 0.1, 0.1, at_round, predicted)

    screened = [window(1, 0.10, 0.40), window(2, 0.30, 0.20), window(3, 0.05, 0.0),
                window(4, 0.20, 0.20), cs.Screened(5, 10, 0.8, [], [(0.0, {})], None, None)]
    assert [cs.calibration(s) for s in screened] == [
        "+10.0% / +40.0% (0.25)", "+30.0% / +20.0% (1.50)", "+5.0% / +0.0%", "+20.0% / +20.0% (1.00)", ""]
    # ratios 0.25, 1.5, 1.0 (none where the twin saw no gain): within 2x on two, under half on one
    assert cs.calibration_summary(screened) == (
        "4 window(s) with a change: the prediction within a factor of 2 of the twin's gain over its "
        "period on 2, under half of it on 1; median ratio 1.00")
