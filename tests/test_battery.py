"""The property battery fails policies that break the engine's contract (mutants of FIFO that
passed it while the engine let a policy act outside ``schedule``, write to the job columns or
to the nodes, or ask for a wake-up at no time), and a plugin author can run it on a policy from
outside the tree."""

from __future__ import annotations

import math

import pytest

from autosched.errors import SimulationError
from autosched.policies import battery as B
from autosched.policies.fifo import Fifo


class StartsOnArrival(Fifo):
    """Starts an arriving job at once when nothing waits: the decision FIFO would take, in the
    wrong hook."""

    name = "starts_on_arrival"

    def on_arrival(self, j, now):
        if not self.by_size and self.part.start(j):
            return
        super().on_arrival(j, now)


class StartsOnFinish(Fifo):
    """Decides as soon as a job ends, from ``on_finish``."""

    name = "starts_on_finish"

    def on_finish(self, j, now):
        self.schedule(now)


class StartsOnReconfigure(Fifo):
    """Decides inside ``on_reconfigure``, before the engine's ``schedule``."""

    name = "starts_on_reconfigure"

    def on_reconfigure(self, config, now):
        super().on_reconfigure(config, now)
        self.schedule(now)


class PreemptsOnArrival(Fifo):
    """Stops every running job when one arrives and queues it again: preemption outside
    ``schedule`` (the runs stay correct: each resumption pays its overhead)."""

    name = "preempts_on_arrival"
    preemptive = True

    def on_arrival(self, j, now):
        for r in list(self.part.running):
            self.part.preempt(r)
            super().on_arrival(r, now)
        super().on_arrival(j, now)


class WritesGpus(Fifo):
    """Rewrites each job's GPU count to 1: two 4-GPU jobs then ran at once on 4 GPUs, and the
    records said 1 GPU each, so the battery's GPU accounting agreed."""

    name = "writes_gpus"

    def on_arrival(self, j, now):
        self.jobs.gpus[j] = 1
        super().on_arrival(j, now)


class WritesSubmit(Fifo):
    """Rewrites each job's submit time (the records' JCTs read it)."""

    name = "writes_submit"

    def on_arrival(self, j, now):
        self.jobs.submit[j] = 0.0
        super().on_arrival(j, now)


class PlacesOnThePool(Fifo):
    """Takes a job's GPUs on the engine's nodes itself before starting it: the nodes then held
    GPUs no job ran on, and a later start failed deep in placement (an IndexError)."""

    name = "places_on_the_pool"

    def schedule(self, now):
        for q in self.by_size.values():
            if q:
                self.part.pool.place(self.jobs.gpus[q[0]], "consolidate")
        super().schedule(now)


class SetsFreeGpus(Fifo):
    """Says the partition has more GPUs free than it has."""

    name = "sets_free_gpus"

    def schedule(self, now):
        self.part.pool.free_gpus = self.part.capacity * 2
        super().schedule(now)


class WakesAtNaN(Fifo):
    """Asks for a wake-up at NaN, which breaks the order of the engine's event heap."""

    name = "wakes_at_nan"

    def schedule(self, now):
        self.part.wake_at(math.nan)
        super().schedule(now)


OUTSIDE_SCHEDULE = [StartsOnArrival, StartsOnFinish, StartsOnReconfigure, PreemptsOnArrival]


@pytest.mark.parametrize("mutant", OUTSIDE_SCHEDULE, ids=lambda c: c.name)
def test_the_battery_fails_a_policy_that_acts_outside_schedule(mutant):
    with pytest.raises(SimulationError, match="only in its schedule hook"):
        B.check_policy(mutant)


@pytest.mark.parametrize("mutant", [WritesGpus, WritesSubmit], ids=lambda c: c.name)
def test_the_battery_fails_a_policy_that_writes_to_the_job_columns(mutant):
    with pytest.raises(TypeError, match="'tuple' object does not support item assignment"):
        B.check_policy(mutant)


@pytest.mark.parametrize("mutant, says", [(PlacesOnThePool, "`pool.place` is the engine's"),
                                           (SetsFreeGpus, "`pool.free_gpus` cannot be set")],
                         ids=["place", "set"])
def test_the_battery_fails_a_policy_that_writes_to_the_nodes(mutant, says):
    with pytest.raises(SimulationError, match=says):
        B.check_policy(mutant)


def test_the_battery_fails_a_policy_that_asks_for_a_wake_up_at_nan():
    with pytest.raises(SimulationError, match="NaN is not"):
        B.check_policy(WakesAtNaN)


def test_a_policy_plans_on_a_copy_of_the_nodes():
    """What the nodes look like is read-only and current; a planning copy is the policy's own."""
    from autosched.sim import Simulator
    from simkit import cluster, make_trace

    sim = Simulator(make_trace([(0, 3, 100), (0, 2, 100)]), cluster(2, 4), Fifo({}))
    sim.run(until=1)
    view = sim.partitions[0].pool
    assert (view.free, view.free_gpus, view.nodes, view.gpn) == ((1, 2), 3, 2, 4)  # best fit: 3 on node 0, 2 on 1
    plan = view.planning_copy()
    assert plan.place(2, "consolidate") == ((1, 2),) and plan.free == [1, 0]
    assert view.free == (1, 2) and sim.run().finished == 2  # the engine's nodes did not move
    with pytest.raises(TypeError):
        view.free[0] = 4  # a copy, read-only


def test_the_mutants_are_fifo_otherwise():
    # The mutants' own decisions are FIFO's: the battery passes the unmutated base, so what
    # fails them is the broken contract alone.
    B.check_policy(Fifo, greedy={"backfill": True, "reserve_after": 7 * 86400.0}, examples=20)


class Undeclared(Fifo):
    """A subclass that forgot to name itself (inherits fifo's name) and drops placement."""

    summary = ""


def test_check_declaration_names_what_is_missing():
    with pytest.raises(AssertionError, match="summary"):
        B.check_declaration(Undeclared)


class StuckPolicy(Fifo):
    """Never starts anything: the battery's horizon turns the livelock into a failure."""

    name = "stuck"

    def schedule(self, now):
        pass


def test_a_policy_that_leaves_jobs_waiting_fails_instead_of_hanging():
    with pytest.raises(AssertionError, match="still unfinished"):
        B.check_invariants(StuckPolicy, examples=5)
