"""The engine: reconfiguring mid-run, VCs, the records, errors."""

import math

import numpy as np
import pytest

from autosched.cluster import parse_cluster
from autosched.policies import POLICIES, get_policy
from autosched.sim import SimulationError, Simulator
from autosched.sim.engine import RUNNING, WAITING
from simkit import cluster, jct, make_trace, run


def test_reconfigure_acts_at_the_time_run_stopped():
    # Strict FIFO: A (3 GPUs) runs 0-100; B (2 GPUs) blocks C (1 GPU). At 50 the operator turns
    # backfill on: C starts at 50 (not at 0, the last event before 50): 50-60 -> JCT 60.
    jobs = [(0, 3, 100), (0, 2, 50), (0, 1, 10)]
    sim = Simulator(make_trace(jobs), cluster(), get_policy("fifo")({}), record_segments=True)
    sim.run(until=50)
    assert sim.now == 50
    sim.reconfigure({"backfill": True, "reserve_after": 3600})
    sim.run()
    assert jct(sim) == [100, 150, 60]


def test_reconfigure_mid_run_keeps_every_job_accounted_for():
    # Tiresias with 2 queues, then 3 queues and a different threshold while jobs are running
    # and queued: each job still finishes once and does exactly its work.
    jobs = [(0, 4, 300), (50, 2, 300), (50, 2, 300), (120, 1, 50), (130, 4, 200)]
    cl = cluster(1, 4)
    sim = Simulator(make_trace(jobs), cl, get_policy("tiresias")({"queues": 2, "threshold": 400.0}),
                    record_segments=True)
    sim.run(until=150)
    assert RUNNING in sim.state and WAITING in sim.state  # jobs are both running and queued
    sim.reconfigure({"queues": 3, "threshold": 200.0, "threshold_growth": 3.0, "placement": "count"})
    sim.run()
    rec = sim.records()
    assert sim.finished == len(jobs) and np.isfinite(rec.end).all()
    ovh = cl.overhead(1)
    assert np.allclose(rec.run_time, rec.duration + ovh * rec.preemptions)
    assert sorted(j for j, *_ in sim.segments).count(0) == rec.preemptions[0] + 1


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_reconfigure_every_policy_to_its_default_and_back(name):
    cls = get_policy(name)
    jobs = [(0, 2, 100), (10, 4, 50), (20, 1, 30), (30, 2, 200), (40, 4, 10)]
    sim = Simulator(make_trace(jobs, users=["a", "b", "a", "c", "b"]), cluster(2, 2),
                    cls({"placement": "spread"}), record_segments=True)
    sim.run(until=25)
    sim.reconfigure(cls.space.default())
    sim.run(until=60)
    sim.reconfigure({"placement": "count"})
    sim.run()
    assert sim.finished == len(jobs)
    assert (sim.records().end >= sim.records().first_start).all()


class _Recorder(get_policy("fifo")):
    """Strict FIFO that logs every hook the engine calls (a unit test of the call order)."""

    def bind(self, part, jobs):
        self.log = [("bind",)]
        super().bind(part, jobs)

    def on_arrival(self, j, now):
        self.log.append(("arrival", j, now))
        super().on_arrival(j, now)

    def on_finish(self, j, now):
        self.log.append(("finish", j, now))
        super().on_finish(j, now)

    def schedule(self, now):
        self.log.append(("schedule", now))
        super().schedule(now)

    def on_reconfigure(self, config, now):
        self.log.append(("reconfigure", dict(config)["placement"], now))
        super().on_reconfigure(config, now)


def test_hooks_are_called_in_the_documented_order():
    # A (4 GPUs) 0-10; B (4) arrives at 10 as A finishes: the arrival comes before the finish,
    # then one decision at 10 starts B. At 12 the run is reconfigured: on_reconfigure(config, 12)
    # then a decision at 12. B ends at 20, a decision follows (nothing waits).
    sim = Simulator(make_trace([(0, 4, 10), (10, 4, 10)]), cluster(), _Recorder({}))
    sim.run(until=12)
    sim.reconfigure({"placement": "count"})
    sim.run()
    assert sim.policies[0].log == [
        ("bind",), ("arrival", 0, 0.0), ("schedule", 0.0),
        ("arrival", 1, 10.0), ("finish", 0, 10.0), ("schedule", 10.0),
        ("reconfigure", "count", 12), ("schedule", 12),
        ("finish", 1, 20.0), ("schedule", 20.0),
    ]


def test_the_callers_policy_is_never_bound_and_serves_many_runs(tmp_path):
    vcs = tmp_path / "vcs.csv"
    vcs.write_text("vc,nodes,gpus_per_node\na,1,4\nb,1,4\n")
    jobs = [(0, 2, 100), (10, 4, 50), (20, 1, 30), (30, 2, 200)]
    trace = make_trace(jobs, vcs=["a", "b", "a", "b"])
    policy = get_policy("tiresias")({"queues": 2, "threshold": 100.0})
    first = Simulator(trace, parse_cluster(str(vcs)), policy, record_segments=True).run()
    second = Simulator(trace, parse_cluster(str(vcs)), policy, record_segments=True).run()
    assert not hasattr(policy, "part")  # each partition ran a clone
    a, b = first.policies
    assert a is not b and a is not policy and a.config == b.config == policy.config
    assert first.segments == second.segments and first.finished == len(jobs)


def test_the_engine_never_imports_policies():
    # The contract lives in sim/contract.py so that the engine layer stands below the policies.
    import ast
    from pathlib import Path

    import autosched.sim

    for path in Path(autosched.sim.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "policies" not in (node.module or ""), path.name
            elif isinstance(node, ast.Import):
                assert not any("policies" in a.name for a in node.names), path.name


def test_jobs_run_only_on_their_vc(tmp_path):
    f = tmp_path / "vcs.csv"
    f.write_text("vc,nodes,gpus_per_node\nX,1,4\nY,1,4\n")
    spec = parse_cluster(str(f))
    # Two 4-GPU jobs in X share X's node: 0-100, 100-200. Y's job runs at once on Y's node.
    sim = run([(0, 4, 100), (0, 4, 100), (0, 4, 100)], "fifo", vcs=["X", "X", "Y"], spec=spec)
    assert jct(sim) == [100, 200, 100]
    assert sim.records().partition.tolist() == [0, 0, 1]


def test_records():
    sim = run([(0, 4, 100), (30, 4, 20)], "srtf")
    rec = sim.records()
    assert rec.submit.tolist() == [0, 30]
    assert rec.first_start.tolist() == [0, 30]
    assert rec.end.tolist() == [160, 50]
    assert rec.run_time.tolist() == [140, 20]
    assert rec.queue.tolist() == [20, 0]  # A waited 50 - 30 = 20 s while preempted
    assert rec.gpus.tolist() == [4, 4]


def test_run_until_then_run_is_the_same_as_one_run():
    jobs = [(0, 3, 100), (5, 2, 50), (7, 1, 10), (50, 4, 30), (60, 1, 5)]
    one = run(jobs, "tiresias", {"threshold": 100.0})
    sim = Simulator(make_trace(jobs), cluster(), get_policy("tiresias")({"threshold": 100.0}),
                    record_segments=True)
    for t in (3, 5, 55.5, 120):
        sim.run(until=t)
    sim.run()
    assert jct(sim) == jct(one)
    assert sim.segments == one.segments


def test_empty_trace():
    sim = run([], "fifo")
    assert sim.finished == 0 and len(sim.records().jct) == 0


def test_a_job_too_large_for_its_partition_is_refused():
    with pytest.raises(SimulationError, match="fit_to_cluster"):
        run([(0, 5, 10)], "fifo")


def test_a_policy_that_strands_jobs_is_reported():
    class Lazy(get_policy("fifo")):
        def schedule(self, now):
            pass

    with pytest.raises(SimulationError, match="never finished"):
        Simulator(make_trace([(0, 1, 10)]), cluster(), Lazy({})).run()


def test_wake_in_the_past_is_ignored():
    sim = Simulator(make_trace([(0, 1, 10)]), cluster(), get_policy("fifo")({}))
    sim.run(until=5)
    sim.partitions[0].wake_at(1.0)
    sim.partitions[0].wake_at(math.inf)
    sim.run()
    assert sim.records().end.tolist() == [10]


def test_a_cancelled_wake_up_brings_no_call():
    # One job (0-10 s): the policy asks for 20 and 30 at its first call, then drops the request
    # (or not). Calls: 0 (arrival), 10 (the end), and 30 only while the request stands (the
    # second request replaced the first).
    class Asks(get_policy("fifo")):
        def bind(self, part, jobs):
            super().bind(part, jobs)
            self.calls = []

        def schedule(self, now):
            super().schedule(now)
            self.calls.append(now)
            if now == 0:
                self.part.wake_at(20.0)
                self.part.wake_at(30.0)
                if self.cancel:
                    self.part.cancel_wake()

    for cancel, calls in ((False, [0.0, 10.0, 30.0]), (True, [0.0, 10.0])):
        Asks.cancel = cancel
        sim = Simulator(make_trace([(0, 1, 10)]), cluster(), Asks({})).run()
        assert sim.policies[0].calls == calls


def test_a_nan_wake_up_is_a_contract_error():
    """NaN is neither before `now` nor infinite: put on the event heap, it broke the heap's order
    and the run ended with every job "never finished"."""
    class Sleepy(get_policy("fifo")):
        def schedule(self, now):
            super().schedule(now)
            self.part.wake_at(float("nan"))

    with pytest.raises(SimulationError, match=r"wake_at\(nan\): a wake-up time must be a number"):
        Simulator(make_trace([(0, 1, 10), (1, 1, 10)]), cluster(), Sleepy({})).run()


@pytest.mark.parametrize("gpus, overhead", [(8, 40.0), (16, 60.0)])
def test_restart_overhead_depends_on_job_size(gpus, overhead):
    # srtf on 2x8: A (100 s) is preempted at 30 by B (20 s, 16 GPUs): A resumes at 50 and pays
    # 40 s (<= 8 GPUs) or 60 s (> 8 GPUs, Lucid's rule) before its last 70 s.
    sim = run([(0, gpus, 100), (30, 16, 20)], "srtf", nodes=2, gpn=8)
    assert sim.records().end.tolist() == [50 + overhead + 70, 50]


def test_restart_overhead_is_a_cluster_property():
    sim = run([(0, 4, 100), (30, 4, 20)], "srtf", restart_overhead=(5.0, 7.0))
    assert sim.records().end.tolist() == [50 + 5 + 70, 50]


def test_progress_is_reported_at_the_end():
    seen = []
    Simulator(make_trace([(0, 1, 10), (5, 1, 10)]), cluster(), get_policy("fifo")({}),
              progress=lambda done, total: seen.append((done, total))).run()
    assert seen[-1] == (2, 2)


# ---------------------------------------------------------------- the engine enforces the contract

Fifo = get_policy("fifo")


class _WritesGpus(Fifo):
    """Rewrites each arriving job's GPU count to 1 in the columns it was handed."""

    def on_arrival(self, j, now):
        self.jobs.gpus[j] = 1
        super().on_arrival(j, now)


def test_a_policy_cannot_rewrite_the_job_columns():
    # Two 4-GPU jobs on 4 GPUs. When JobInfo handed the engine's own lists, this policy made
    # them run at once (both 0-100) and the records said 1 GPU each; the columns are tuples now.
    sim = Simulator(make_trace([(0, 4, 100), (0, 4, 100)]), cluster(1, 4), _WritesGpus({}))
    assert isinstance(sim.jobs.gpus, tuple) and isinstance(sim.jobs.submit, tuple)
    with pytest.raises(TypeError, match="does not support item assignment"):
        sim.run()
    assert sim.records().gpus.tolist() == [4, 4]
    plain = run([(0, 4, 100), (0, 4, 100)], "fifo")
    assert jct(plain) == [100, 200]


def test_every_column_a_policy_is_handed_is_read_only():
    trace = make_trace([(0, 1, 10), (5, 2, 10)], users=["a", "b"], vcs=["X", "X"])
    sim = Simulator(trace, cluster(1, 4), get_policy("sjf")({}))  # an oracle: durations too
    info = sim.jobs
    for col in ("submit", "gpus", "vc", "user", "duration"):
        assert isinstance(getattr(info, col), tuple), col
    assert info.duration == (10.0, 10.0) and info.user == (0, 1) and info.labels["user"] == ("a", "b")
    with pytest.raises(TypeError):
        info.labels["user"] = ("x",)  # type: ignore[index]
    part = sim.partitions[0]
    with pytest.raises(TypeError):
        part.running[0] = None  # type: ignore[index]


class _ActsIn(Fifo):
    """Calls start (or preempt) from one hook other than schedule."""

    hook = "on_arrival"
    action = "start"

    def _act(self, j):
        if self.action == "start":
            self.part.start(j)
        else:
            self.part.preempt(next(iter(self.part.running)))

    def bind(self, part, jobs):
        super().bind(part, jobs)
        if self.hook == "bind":
            self._act(0)

    def on_arrival(self, j, now):
        super().on_arrival(j, now)
        if self.hook == "on_arrival" or (self.hook == "on_arrival_preempt" and self.part.running):
            self._act(j)

    def on_finish(self, j, now):
        if self.hook == "on_finish" and self.by_size:
            self._act(next(iter(self.by_size.values()))[0])

    def on_reconfigure(self, config, now):
        super().on_reconfigure(config, now)
        if self.hook == "on_reconfigure":
            self._act(1)


@pytest.mark.parametrize("hook, action", [("bind", "start"), ("on_arrival", "start"), ("on_finish", "start"),
                                          ("on_reconfigure", "start"), ("on_arrival_preempt", "preempt")])
def test_start_and_preempt_outside_schedule_raise(hook, action):
    # A (4 GPUs) arrives at 0, B (4 GPUs) at 10. Each call fails with the contract's rule,
    # whatever the job's state: starting A in bind (A not yet arrived) or on its arrival (A
    # waiting), B at A's finish (at 100, B waiting) or on a reconfiguration at 50 (B waiting),
    # preempting A on B's arrival (A running).
    policy = type("Mutant", (_ActsIn,), {"hook": hook, "action": action})({})
    if hook == "bind":
        with pytest.raises(SimulationError, match="cannot start job 0 here: a policy starts and preempts jobs only in its schedule hook"):
            Simulator(make_trace([(0, 4, 100), (10, 4, 100)]), cluster(1, 4), policy)
        return
    sim = Simulator(make_trace([(0, 4, 100), (10, 4, 100)]), cluster(1, 4), policy)
    if hook == "on_reconfigure":
        sim.run(until=50)
        with pytest.raises(SimulationError, match="cannot start job 1 here"):
            sim.reconfigure({})
        return
    job = {"on_arrival": 0, "on_finish": 1, "on_arrival_preempt": 0}[hook]
    with pytest.raises(SimulationError, match=f"cannot {action} job {job} here"):
        sim.run()


class _FailsOnce(Fifo):
    """Its decision at t=10 raises (a bug in a policy)."""

    def schedule(self, now):
        if now == 10:
            raise RuntimeError("bug")
        super().schedule(now)


def test_after_a_failed_decision_nothing_outside_schedule_may_start_a_job():
    sim = Simulator(make_trace([(0, 4, 100), (10, 4, 100)]), cluster(1, 4), _FailsOnce({}))
    with pytest.raises(RuntimeError, match="bug"):
        sim.run()
    with pytest.raises(SimulationError, match="only in its schedule hook"):
        sim.partitions[0].start(1)


def test_the_simulator_keeps_the_policy_type_it_was_given():
    # `Simulator[P].policies` are clones of the caller's type: typed code reads a policy's own
    # attributes from them (as `autosched simulate` reads multifactor's backfill_kind).
    sim = Simulator(make_trace([(0, 1, 10)]), cluster(), get_policy("multifactor")({}))
    sim.run()
    assert type(sim.policies[0]) is get_policy("multifactor") and sim.policies[0].backfill_kind is not None


@pytest.mark.parametrize("until", [5.0, math.nan])
def test_a_run_never_goes_back_in_time(until):
    """The clock stands at 10 after the first run; a run to 5 (or to NaN) would have set it
    back: a contract error, and the run goes on from 10 as if it had not been asked."""
    jobs = [(0, 2, 100), (1, 4, 100)]
    sim = Simulator(make_trace(jobs), cluster(1, 8), get_policy("fifo")({}))
    sim.run(until=10)
    with pytest.raises(SimulationError, match="only goes forward"):
        sim.run(until=until)
    assert sim.now == 10 and jct(sim.run()) == jct(run(jobs, "fifo", gpn=8))
