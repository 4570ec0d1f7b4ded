"""multifactor (Slurm priority) on tiny traces (1x4 cluster), JCTs worked out by hand; and
its slurm.conf export."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.cluster import SlurmClocks
from autosched.export.slurm import slurm_conf_lines, slurm_time
from autosched.policies import get_policy
from autosched.policies.multifactor import Multifactor, WaitingJobs
from autosched.sim import Simulator
from autosched.space import ConfigError
from simkit import cluster, jct, make_trace, run, starts

PLACEMENTS = ("consolidate", "spread", "count")  # one node: every placement is the same here
ONLY = {"PriorityWeightAge": 0, "PriorityWeightFairshare": 0, "PriorityWeightJobSize": 0,
        "PriorityCalcPeriod": 1, "backfill": False}

# A (u1, 600 s) runs first; B (u1) and C (u2) wait, B submitted earlier.
FS_JOBS = [(0, 4, 600), (10, 4, 100), (20, 4, 100)]
FS_USERS = ["u1", "u1", "u2"]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_fair_share_puts_the_unserved_user_first(placement):
    cfg = {**ONLY, "PriorityWeightFairshare": 10000, "placement": placement}
    sim = run(FS_JOBS, "multifactor", cfg, users=FS_USERS)
    # At 600 (a recalculation) u1 has all the usage: share 1, shares 1/2 -> 2^-2 = 0.25;
    # u2: 2^0 = 1. C (10000) before B (2500): C 600-700, B 700-800.
    assert jct(sim) == [600, 790, 680]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_age_alone_is_fifo(placement):
    cfg = {**ONLY, "PriorityWeightAge": 1000, "placement": placement}
    sim = run(FS_JOBS, "multifactor", cfg, users=FS_USERS)
    assert jct(sim) == [600, 690, 780]  # B 600-700, C 700-800


# At 600 u1 has all the usage, u2 none (one account, equal shares 1/2).
#  Fair Tree: u2's level fair share is infinite, u1's 0.5 / 1: ranks 2, 1 of 2 users -> 1, 0.5.
#  Classic: UE(u1) = 1 + (1 - 1) / 2 = 1 -> 2^(-1/0.5) = 0.25; UE(u2) = 0 + (1 - 0) / 2 -> 2^-1.
@pytest.mark.parametrize("flags, factors", [("FAIR_TREE", [0.5, 1.0]), ("NO_FAIR_TREE", [0.25, 0.5])])
def test_fair_share_factors_and_decayed_usage(flags, factors):
    cfg = {**ONLY, "PriorityWeightFairshare": 10000, "PriorityDecayHalfLife": 3600.0,
           "PriorityFlags": flags}
    pol = get_policy("multifactor")(cfg)
    sim = Simulator(make_trace(FS_JOBS, FS_USERS), cluster(), pol).run(until=600)
    mf = sim.policies[0]
    assert mf.t0 == 600
    assert mf.fairshare[:2].tolist() == factors  # associations: u1 = 0, u2 = 1
    # 4 GPUs over [0, 600], each second decayed to t=600 with half-life 1 h.
    h = 3600.0
    assert mf.used[0] == pytest.approx(4 * h / math.log(2) * (1 - 2 ** (-600 / h)), rel=1e-12)


def test_usage_does_not_depend_on_how_often_it_is_recalculated():
    jobs = [(0, 2, 1000), (100, 1, 3000), (200, 1, 500), (4000, 1, 1)]
    users = ["a", "b", "a", "c"]
    used = []
    for period in (1, 7, 60):
        cfg = {"PriorityCalcPeriod": period, "PriorityDecayHalfLife": 1800.0}
        sim = Simulator(make_trace(jobs, users), cluster(), get_policy("multifactor")(cfg))
        sim.run(until=3600)
        sim.reconfigure(sim.policies[0].config)  # recalculates at now = 3600
        used.append(sim.policies[0].used.tolist())
    assert used[0][:2] == pytest.approx(used[1][:2], rel=1e-9)
    assert used[0][:2] == pytest.approx(used[2][:2], rel=1e-9)
    assert min(used[0][:2]) > 0  # accounts a and b ran; c did not yet


# A (4 GPUs, 1200 s) runs; B (1 GPU, t=0) and C (4 GPUs, t=300) wait. Weights: age 10000,
# GPUs (PriorityWeightTRES GRES/gpu) 1000: GPUs / 4 x 1000. At 1200 (priorities truncated):
#  PriorityMaxAge 3600: B = 10000 x 1200/3600 + 250 = 3583; C = 10000 x 900/3600 + 1000 = 3500:
#      B 1200-1300, then C 1300-1400 (it cannot pass B's GPU... it needs all 4).
#  PriorityMaxAge 600: both ages capped at 1: B = 10250, C = 11000: C 1200-1300, B 1300-1400.
@pytest.mark.parametrize("max_age, expected", [(3600.0, [1200, 1300, 1100]),
                                               (600.0, [1200, 1400, 1000])])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_max_age_caps_the_age_factor(max_age, expected, placement):
    cfg = {**ONLY, "PriorityWeightAge": 10000, "PriorityWeightTRES.GRES/gpu": 1000,
           "PriorityMaxAge": max_age, "placement": placement}
    sim = run([(0, 4, 1200), (0, 1, 100), (300, 4, 100)], "multifactor", cfg)
    assert jct(sim) == expected


# On 4 nodes of 1 GPU a job of g GPUs takes g nodes and g CPUs (one per node), so Slurm's size
# factor with PriorityFavorSmall is ((4 - g) / 4 + (4 - g) / 4) / 2 = 1 - g / 4.
# A (4 GPUs) runs 0-590. B (4 GPUs, t=10, size factor 0 with PriorityFavorSmall), C (1 GPU,
# t=310, size factor 0.75 x 660 = 495 at arrival). Age weight 1000, max age 600 s.
#  PriorityCalcPeriod 5: last recalculation before 590 is at 300: B = 1000 x 290/600 = 483.3 <
#      C's 495: C 590-690 (B cannot pass: 4 GPUs), B 690-790.
#  PriorityCalcPeriod 1: recalculated at 540: B = 883.3; C = 1000 x 230/600 + 495 = 878.3:
#      B 590-690, C 690-790.
@pytest.mark.parametrize("period, expected", [(5, [590, 780, 380]), (1, [590, 680, 480])])
def test_priorities_are_fixed_between_recalculations(period, expected):
    cfg = {**ONLY, "PriorityWeightAge": 1000, "PriorityMaxAge": 600.0, "PriorityWeightJobSize": 660,
           "PriorityFavorSmall": True, "PriorityCalcPeriod": period}
    sim = run([(0, 4, 590), (10, 4, 100), (310, 1, 100)], "multifactor", cfg, nodes=4, gpn=1)
    assert jct(sim) == expected


# A (3 GPUs, 100 s) runs; B (2 GPUs) is the top job (older, larger); C (1 GPU, t=10) fits.
@pytest.mark.parametrize("cfg, c_jct", [
    ({"backfill": False}, 100),                         # sched/builtin: C waits: 100-110
    ({"backfill": True, "reserve_after": 3600}, 10),   # C backfills: 10-20
    ({"backfill": True, "reserve_after": 5}, 100),     # B has waited 10 >= 5 s: reserved
])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_backfill_and_reservation(cfg, c_jct, placement):
    sim = run([(0, 3, 100), (0, 2, 50), (10, 1, 10)], "multifactor", {**cfg, "placement": placement})
    assert jct(sim) == [100, 150, c_jct]


def test_reconfigured_weights_take_effect_at_once():
    # Age only until 300, then fair share only: at 600 C (u2) goes first as in the fair-share case.
    cfg = {**ONLY, "PriorityWeightAge": 1000}
    sim = Simulator(make_trace(FS_JOBS, FS_USERS), cluster(), get_policy("multifactor")(cfg),
                    record_segments=True)
    sim.run(until=300)
    sim.reconfigure({**ONLY, "PriorityWeightFairshare": 10000})
    sim.run()
    assert sim.records().jct.tolist() == [600, 790, 680]


# ----------------------------------------------------------------------------- slurm.conf

def test_slurm_time_format():
    assert slurm_time(7 * 86400) == "7-0"
    assert slurm_time(90 * 60) == "0-01:30:00"
    assert slurm_time(1.5 * 86400) == "1-12:00:00"
    assert slurm_time(3600 + 29) == "0-01:00:00"  # Slurm keeps whole minutes


def test_slurm_conf_lines_of_the_default():
    assert slurm_conf_lines({}) == [
        "PriorityType=priority/multifactor",
        "# PriorityFlags without NO_FAIR_TREE: Fair Tree, Slurm's default",
        "PriorityWeightAge=1000",
        "PriorityMaxAge=7-0",
        "PriorityWeightFairshare=10000",
        "PriorityDecayHalfLife=7-0",
        "PriorityWeightJobSize=1000",
        "PriorityFavorSmall=NO",
        "PriorityWeightTRES=CPU=0,GRES/gpu=0",
        "PriorityCalcPeriod=5",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=30,bf_window=1440,bf_max_job_test=500,bf_resolution=60,"
        "sched_interval=60,default_queue_depth=100,batch_sched_delay=3",
        '# PartitionName=... TRESBillingWeights="CPU=0,GRES/gpu=1"',
        "# placement=consolidate: simulator setting; Slurm's select plugin places jobs",
        "# reserve_after=21600 s: used only for traces without time limits (Slurm's backfill reserves by "
        "job time limits)",
    ]


def test_slurm_conf_lines_of_a_tuned_config():
    lines = slurm_conf_lines({"PriorityWeightAge": 250, "PriorityMaxAge": 2 * 3600.0,
                              "PriorityFavorSmall": "true", "PriorityCalcPeriod": 2,
                              "PriorityFlags": "NO_FAIR_TREE", "PriorityWeightTRES.GRES/gpu": 2000,
                              "TRESBillingWeights.CPU": 1, "TRESBillingWeights.GRES/gpu": 4,
                              "backfill": False, "sched_interval": 20})
    assert "PriorityWeightAge=250" in lines
    assert "PriorityMaxAge=0-02:00:00" in lines
    assert "PriorityFavorSmall=YES" in lines
    assert "PriorityCalcPeriod=2" in lines
    assert "PriorityFlags=NO_FAIR_TREE" in lines
    assert "PriorityWeightTRES=CPU=0,GRES/gpu=2000" in lines
    assert '# PartitionName=... TRESBillingWeights="CPU=1,GRES/gpu=4"' in lines
    assert "SchedulerType=sched/builtin" in lines
    assert "SchedulerParameters=sched_interval=20,default_queue_depth=100,batch_sched_delay=3" in lines
    assert not any("reserve_after" in line for line in lines)
    # every knob named after slurm.conf appears as a parameter line
    knobs = [k for k in get_policy("multifactor").space.names
             if k.startswith("Priority") and "." not in k]
    assert all(any(line.startswith(k + "=") for line in lines) for k in knobs)


def test_backfill_knobs_go_to_scheduler_parameters():
    lines = slurm_conf_lines({"bf_interval": 5, "bf_window": 60, "bf_max_job_test": 50,
                              "bf_resolution": 10, "bf_continue": True})
    assert ("SchedulerParameters=bf_interval=5,bf_window=60,bf_max_job_test=50,bf_resolution=10,"
            "bf_continue,sched_interval=60,default_queue_depth=100,batch_sched_delay=3") in lines


def test_slurm_conf_lines_reject_a_bad_config():
    with pytest.raises(ConfigError, match="PriorityWeightAge"):
        slurm_conf_lines({"PriorityWeightAge": -1})
    with pytest.raises(ConfigError, match="unknown knob"):
        slurm_conf_lines({"queues": 2})


def test_the_account_is_the_vc_when_there_are_no_users():
    cfg = {**ONLY, "PriorityWeightFairshare": 10000}
    sim = run(FS_JOBS, "multifactor", cfg, vcs=["v1", "v1", "v2"])
    assert jct(sim) == [600, 790, 680]  # as with users u1, u1, u2


def test_one_account_gets_no_fair_share_advantage():
    # With a single account its factor is the same for every job: age alone orders them.
    cfg = {**ONLY, "PriorityWeightFairshare": 10000, "PriorityWeightAge": 1}
    sim = run(FS_JOBS, "multifactor", cfg, users=["u", "u", "u"])
    assert jct(sim) == [600, 690, 780]


def test_the_space_names_defaults_and_choices():
    """Multifactor's knobs, as an operator sees them (placement derives from the base knob and
    adds Slurm's first_fit; the rest are Slurm's names and defaults)."""
    from autosched.policies import PLACEMENT

    space = list(get_policy("multifactor").space)
    assert {k.name: k.default for k in space} == {
        "placement": "consolidate", "PriorityWeightAge": 1000, "PriorityMaxAge": 604800.0,
        "PriorityWeightFairshare": 10000, "PriorityDecayHalfLife": 604800.0, "PriorityFlags": "FAIR_TREE",
        "PriorityWeightJobSize": 1000, "PriorityFavorSmall": False, "PriorityWeightTRES.GRES/gpu": 0,
        "PriorityWeightTRES.CPU": 0, "TRESBillingWeights.GRES/gpu": 1.0, "TRESBillingWeights.CPU": 0.0,
        "PriorityCalcPeriod": 5, "backfill": True, "reserve_after": 21600.0, "bf_interval": 30,
        "bf_window": 1440, "bf_max_job_test": 500, "bf_resolution": 60, "bf_continue": False,
        "sched_interval": 60, "default_queue_depth": 100, "batch_sched_delay": 3}
    assert [k.name for k in space][:1] == ["placement"]
    placement = space[0]
    assert placement.choices == ("consolidate", "spread", "count", "first_fit")
    assert placement.help.startswith(PLACEMENT.help + "; first_fit: ")
    assert space[5].choices == ("FAIR_TREE", "NO_FAIR_TREE")


# Jobs without CPU counts are sized as the site sizes them (ClusterSpec.job_cpus). On 1x4, A (4
# GPUs, 0-100) holds the node; B (4 GPUs, t=1, 50 s) and C (1 GPU, t=2, 50 s) wait, small first.
# Job-size factor, FavorSmall: ((1 - nodes/1) + (4 - cpus)/4) / 2 of 1000:
#   CPUs per GPU (node shape 4 GPUs, 4 CPUs): B 4 CPUs -> 0; C 1 CPU -> (0 + 3/4)/2 = 375: C first
#     at 100 (100-150), then B (4 GPUs do not fit beside C; builtin scheduling stops) 150-200;
#   DefCpuPerGPU=0 (one CPU per node): B and C both 1 CPU -> 375 each, a tie broken by
#     submission: B at 100-150, C at 150-200.
@pytest.mark.parametrize("shape, b_start, c_start", [({}, 150, 100), ({"def_cpu_per_gpu": 0}, 100, 150),
                                                     ({"node_cpus": 16}, 150, 100)])
def test_job_size_counts_cpus_per_gpu(shape, b_start, c_start):
    cfg = {**ONLY, "PriorityWeightJobSize": 1000, "PriorityFavorSmall": True}
    sim = run([(0, 4, 100), (1, 4, 50), (2, 1, 50)], "multifactor", cfg, **shape)
    assert starts(sim) == [0, b_start, c_start]


# The CPU TRES factor weighs the CPUs a job asked for, as Slurm's does while it waits (the test
# cluster with DefCpuPerGPU=1: sprio gives a pending 1-GPU and 8-GPU job the same TRES cpu share,
# 1 CPU of 32, where their job-size factors are 141 and 250). On 1x4, A (4 GPUs, 0-100) holds the
# node; C (1 GPU, t=1) and B (4 GPUs, t=2) wait, 50 s each. PriorityWeightTRES.CPU 1000:
#   no CPU count, DefCpuPerGPU set (1, or 0): each asked for one CPU -> 1000 x 1/4 = 250 each, a
#     tie broken by submission: C at 100-150, then B 150-200, whatever DefCpuPerGPU gives them;
#   no CPU count, the node shape's rule: as if each asked for its 1 CPU per GPU: B 1000, C 250;
#   B asked for 4 CPUs (the trace's num_cpus): 1000 against C's 250: B at 100-150, C 150-200.
@pytest.mark.parametrize("shape, b_cpus, b_start, c_start", [
    ({"def_cpu_per_gpu": 1}, 0, 150, 100), ({"def_cpu_per_gpu": 0}, 0, 150, 100), ({}, 0, 100, 150),
    ({"def_cpu_per_gpu": 1}, 4, 100, 150), ({"def_cpu_per_gpu": 0}, 4, 100, 150), ({}, 4, 100, 150)])
def test_the_cpu_tres_factor_weighs_the_cpus_a_job_asked_for(shape, b_cpus, b_start, c_start):
    from autosched.trace.table import Trace

    tr = make_trace([(0, 4, 100), (1, 1, 50), (2, 4, 50)])
    tr = Trace.from_columns({"job_id": list(tr.job_id), "submit_time": list(tr.submit_time),
                             "num_gpus": list(tr.num_gpus), "duration": list(tr.duration),
                             "num_cpus": [0, 0, b_cpus]})
    cfg = {**ONLY, "PriorityWeightTRES.CPU": 1000}
    sim = Simulator(tr, cluster(1, 4, **shape), get_policy("multifactor")(cfg)).run()
    assert starts(sim) == [0, c_start, b_start]


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 19)), max_size=60))
def test_the_waiting_jobs_are_the_set_of_those_added_and_not_removed(steps):
    # a Python set told the same adds and removes (a remove only of a member) is the answer
    waiting, want = WaitingJobs(20), set()
    for add, j in steps:
        if add:
            waiting.add(j)
            want.add(j)
        elif j in want:
            waiting.remove(j)
            want.discard(j)
        got = waiting.array().tolist()
        assert len(got) == len(set(got)) == len(waiting) and set(got) == want


@settings(max_examples=300, deadline=None)
@given(anchor=st.floats(0.0, 1e6), minutes=st.integers(1, 30), k=st.integers(0, 1000),
       off=st.sampled_from([0.0, 1e-9, -1e-9, 1e-7, -1e-7, 0.5, -0.5]),
       steps=st.lists(st.one_of(st.floats(0.0, 3.0), st.sampled_from([0.0, 1.0, 1 - 1e-6, 1 - 2e-5, 1e-9])),
                      min_size=1, max_size=30))
def test_priorities_are_recalculated_when_the_decay_clock_passes_the_last(anchor, minutes, k, off, steps):
    # `_catch_up` skips its clock arithmetic until just before the next period, and the last
    # recalculation may be off the decay thread's grid (a reconfiguration recalculates at
    # once): with steps of whole periods and a hair less, it recalculates exactly when
    # SlurmClocks.last passes t0.
    sim = Simulator(make_trace([(0, 1, 10)]), cluster(), get_policy("multifactor")({"PriorityCalcPeriod": minutes}))
    p = sim.policies[0]
    p.clocks = SlurmClocks(decay=anchor)
    p.t0 = now = anchor + k * p.period + off * p.period
    recalcs: list[float] = []

    def recalc(t: float) -> None:
        recalcs.append(t)
        p.t0 = t

    p._recalc = recalc
    for step in steps:
        now += step * p.period
        last = SlurmClocks.last(anchor, p.period, now)
        expected = [*recalcs, last] if last > p.t0 else list(recalcs)
        p._catch_up(now)
        assert recalcs == expected


class _Recalcs(Multifactor):
    """multifactor that lists the times of its priority recalculations (the decayed usage, a
    sum of floats, depends on them)."""

    def _recalc(self, t):
        self.recalcs = [*getattr(self, "recalcs", []), t]
        super()._recalc(t)


class _Unshortened(_Recalcs):
    """multifactor with the formulas its shortcuts replace: the main scheduler's delayed tick
    worked out at every call, every main pass run (none skipped because its top job did not fit
    before), a backfill cycle woken for and run whenever one is due (none skipped because no
    waiting job fits), the queue and each cycle's order sorted by lexsort, the smallest waiting
    size by min(); and the main scheduler's periodic pass after the next recalculation, kept
    for the period, checked against its formula. What it schedules is what multifactor
    schedules."""

    def _main_due(self, now):
        self._delay_from = math.nan
        return super()._main_due(now)

    def _main_pass(self, now, depth):
        self._stuck = None
        super()._main_pass(now, depth)

    def _nothing_fits(self):
        return False

    def _cycle_order(self):
        got = super()._cycle_order()
        js = self.waiting.array()
        assert got.tolist() == js[np.lexsort((js, self.neg[js]))][:self.bf.max_job_test].tolist()
        return got

    def schedule(self, now):
        if self.waiting:
            assert self._smallest == min(self.jobs.gpus[j] for j in self.waiting.array().tolist())
        super().schedule(now)
        if self._full_due < math.inf:  # the periodic pass after the next recalculation, worked out now
            clocks = self.clocks
            assert self._full_due == SlurmClocks.next(clocks.tick, clocks.tick_period, SlurmClocks.next(
                0.0, self.sched_interval, self._next_recalc(now)))

    def _recalc(self, t):
        super()._recalc(t)
        if self.waiting:
            js = self.waiting.array()
            best = js[np.lexsort((js, self.neg[js]))].tolist()
            assert self.queue == [(int(self.neg[j]) << self._shift) + j for j in best]


_JOBS = st.lists(st.tuples(st.integers(0, 120), st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 300),
                           st.integers(1, 1200), st.sampled_from(["u1", "u2", "u3"])), min_size=1, max_size=25)


@settings(max_examples=100, deadline=None)
@given(_JOBS, st.integers(0, 5), st.integers(1, 5), st.booleans(), st.integers(0, 3))
def test_the_shortcuts_schedule_as_the_formulas_they_replace(jobs, delay, period, backfill, weights):
    # time-limited jobs on 2x4, under the Slurm path (main passes, backfill cycles, recalculations)
    jobs = sorted(jobs)
    trace = make_trace([(s, g, d) for s, g, d, _, _ in jobs], [u for *_, u in jobs]).replace(
        time_limit=np.asarray([lim for _, _, _, lim, _ in jobs], dtype=float))
    w = [{"PriorityWeightAge": 1000}, {"PriorityWeightFairshare": 10000},
         {"PriorityWeightJobSize": 1000, "PriorityFavorSmall": True}, {}][weights]
    cfg = {**ONLY, **w, "batch_sched_delay": delay, "PriorityCalcPeriod": period, "backfill": backfill}
    spec = cluster(2, 4)
    got = Simulator(trace, spec, _Recalcs(cfg), record_segments=True).run()
    want = Simulator(trace, spec, _Unshortened(cfg), record_segments=True).run()
    assert got.segments == want.segments
    assert getattr(got.policies[0], "recalcs", []) == getattr(want.policies[0], "recalcs", [])
    assert jct(got) == jct(want)
