"""What backfill costs slurmctld: ``sdiag``'s backfill statistics read (a real 22.05 output, and
the test cluster's own after a cycle), recorded with a proposal and each round, shown by the
status and the page, and a ``bf_*`` change after which a cycle no longer fits its interval rolled
back with a notice (the twin treats a backfill cycle as free)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autosched.live.backfill import BackfillStats, parse_sdiag
from autosched.live.records import Event, Evidence, Revision, RevisionKind, RevisionState
from autosched.live.round import Action, overrun
from autosched.service import page
from live_helpers import make

SDIAG = Path(__file__).parent / "fixtures" / "sdiag_22.05.txt"  # the test cluster's, captured


def test_sdiag_of_slurm_22_05_read_by_hand():
    got = parse_sdiag(SDIAG.read_text())
    # the file's section: Total cycles 1, Last cycle when ... (1796523787), Last cycle 362 us,
    # Max 362, Mean 362, Last depth cycle 3, Depth Mean 3, Last queue length 3
    assert got == BackfillStats(cycles=1, last_cycle_at=1796523787.0, last_cycle=362e-6,
                                max_cycle=362e-6, mean_cycle=362e-6, last_depth=3, mean_depth=3.0,
                                queue_length=3)
    assert got.text() == "last cycle 0.36 ms (max 0.36 ms, mean 0.36 ms), depth 3 of 3 queued, 1 cycles"
    assert BackfillStats.from_dict(got.to_dict()) == got
    none = parse_sdiag("Backfilling stats\n\tTotal cycles: 0\n\tLast cycle when: N/A\n")
    assert none.cycles == 0 and none.last_cycle_at is None
    assert none.text() == "no backfill cycle since sdiag's counters were reset"
    assert BackfillStats.from_dict({"cycles": "x"}) is None and BackfillStats.from_dict(None) is None


def _rev(diff, config, before: BackfillStats | None, applied_at: float = 1000.0,
         kind=RevisionKind.PROPOSAL) -> Revision:
    return Revision(id=3, created=900.0, kind=kind, config=config, diff=diff, parent=2,
                    trigger="period",
                    evidence=Evidence(backfill=before.to_dict() if before else None),
                    events=(Event(900.0, RevisionState.PROPOSED, "agent:auto", ""),
                            Event(applied_at, RevisionState.APPLIED, "agent:auto", "")))


def _stats(took: float, at: float) -> BackfillStats:
    return BackfillStats(cycles=10, last_cycle_at=at, last_cycle=took, max_cycle=took,
                         mean_cycle=took, last_depth=3000, mean_depth=2500.0, queue_length=4000)


def test_the_overrun_rule_worked_by_hand():
    """bf_interval 30 -> 10 s: a cycle of 12 s after the change, where the last one before took 5
    s (it fit its 30 s), rolls it back; each other case does not."""
    change = _rev({"bf_interval": (30, 10)}, {"bf_interval": 10}, _stats(5.0, 990.0))
    why = overrun(change, _stats(12.0, 1010.0))
    assert why is not None and why.startswith(
        "a backfill cycle took 12.0 s after revision 3 went live, longer than its interval "
        "(bf_interval=10 s): slurmctld backfills back to back; rolled back to revision 2")
    assert overrun(change, _stats(9.0, 1010.0)) is None  # fits its 10 s
    assert overrun(change, _stats(12.0, 999.0)) is None  # that cycle ran before the change
    assert overrun(change, None) is None  # sdiag said nothing
    # it did not fit before the change either (40 s > 30 s): not this change's doing
    assert overrun(_rev({"bf_interval": (30, 10)}, {"bf_interval": 10}, _stats(40.0, 990.0)),
                   _stats(41.0, 1010.0)) is None
    # a change of no bf_* knob: its cost is not backfill's
    assert overrun(_rev({"PriorityWeightAge": (1, 5)}, {"bf_interval": 10}, None),
                   _stats(12.0, 1010.0)) is None
    # bf_max_job_test 500 -> 5000 with the interval as it was (30 s): a 31 s cycle overruns it
    assert overrun(_rev({"bf_max_job_test": (500, 5000)}, {"bf_interval": 30}, None),
                   _stats(31.0, 1010.0)) is not None


def test_a_bf_change_that_backfill_cannot_afford_is_rolled_back_with_a_notice(tmp_path):
    agent, fake = make(tmp_path)
    fake.update(backfill=_stats(0.5, 0.0).to_dict())
    out = agent.step()  # a proposal, recording what backfill cost before it
    before = BackfillStats.from_dict(agent.store.get(out.revision).evidence.backfill)
    assert before == _stats(0.5, 0.0)
    agent.reject(out.revision, "operator:x")
    base = agent.store.running().config
    p = agent.store.create({**base, "bf_interval": 10, "bf_max_job_test": 5000},
                           trigger="manual", actor="t",
                           evidence=Evidence(backfill=_stats(0.5, 0.0).to_dict()))
    told = []
    agent.sinks.append(told.append)
    agent.approve(p.id, "operator:alice")
    applied = agent.store.get(p.id).applied_at
    fake.update(backfill=_stats(11.0, applied + 5).to_dict())  # the next cycle: 11 s > 10 s
    out = agent.step()
    assert out.action is Action.ROLLED_BACK, out
    assert out.why.startswith(f"a backfill cycle took 11.0 s after revision {p.id} went live, "
                              "longer than its interval (bf_interval=10 s)")
    assert agent.store.running().config["bf_interval"] == base["bf_interval"]
    assert [a.kind.value for a in told if a.kind.value == "rollback"] == ["rollback"]
    assert agent.store.last_round().backfill.last_cycle == 11.0
    st = agent.status()
    assert st.backfill == _stats(11.0, applied + 5)
    html = page.render(st, agent.store.history(), [], state_dir="s")
    assert "<dd id=backfill>last cycle 11.0 s (max 11.0 s, mean 11.0 s), depth 3000 of 4000 " \
           "queued, 10 cycles</dd>" in html


@pytest.mark.slurm
def test_the_test_clusters_sdiag_is_read_after_a_backfill_cycle(slurm_testbed):
    """Four 8-GPU blockers fill the cluster; three small jobs wait: the backfill scheduler looks
    at them within its 30 s interval, and the connector reads that cycle."""
    from autosched.live.slurm import SlurmConnector

    bed = slurm_testbed
    t0 = time.time()
    blockers = [bed.sbatch(8, 120, time_limit="5") for _ in range(4)]
    small = [bed.sbatch(4, 5, user="bob", account="chemistry", time_limit="2") for _ in range(3)]
    try:
        conn = SlurmConnector(bed.include, bed.conf)
        deadline = time.time() + 75
        while True:
            got = conn.backfill_stats()
            if (got.last_cycle_at or 0) >= t0 - 1 or time.time() > deadline:
                break
            time.sleep(2)
        assert got.cycles >= 1 and got.last_cycle_at is not None and got.last_cycle_at >= t0 - 1
        assert got.last_cycle is not None and 0 < got.last_cycle < 30
        assert got.last_depth is not None and got.last_depth >= 1
    finally:
        bed.run("scancel", *map(str, blockers + small))
