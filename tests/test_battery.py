"""The property battery fails policies that break the engine's contract (mutants of FIFO that
passed it while the engine let a policy act outside ``schedule`` and write to the job columns),
and a plugin author can run it on a policy from outside the tree."""

from __future__ import annotations

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


OUTSIDE_SCHEDULE = [StartsOnArrival, StartsOnFinish, StartsOnReconfigure, PreemptsOnArrival]


@pytest.mark.parametrize("mutant", OUTSIDE_SCHEDULE, ids=lambda c: c.name)
def test_the_battery_fails_a_policy_that_acts_outside_schedule(mutant):
    with pytest.raises(SimulationError, match="only in its schedule hook"):
        B.check_policy(mutant)


@pytest.mark.parametrize("mutant", [WritesGpus, WritesSubmit], ids=lambda c: c.name)
def test_the_battery_fails_a_policy_that_writes_to_the_job_columns(mutant):
    with pytest.raises(TypeError, match="'tuple' object does not support item assignment"):
        B.check_policy(mutant)


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
