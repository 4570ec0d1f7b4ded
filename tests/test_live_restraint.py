"""What holds the agent back (live/restraint.py), on hand-made revisions: the calibration record,
the brake, the cooldown of a rejected config."""

from __future__ import annotations

from autosched.live.records import Event, Evidence, JudgedOutcome, Revision, RevisionKind, RevisionState
from autosched.live.restraint import Calibrated, brake, calibration, cooling

S = RevisionState
T = 1_800_000_000.0


def rev(id_, predicted=None, judged=None, state=S.APPLIED, actor="operator:bob", at=T, config=None):
    outcome = None if predicted is None and judged is None else JudgedOutcome(
        "avg_jct", predicted, "kept: ..." if judged is not None else "not judged: ...", counterfactual_gain=judged)
    events = (Event(at - 10, S.PROPOSED, "agent:propose", ""), Event(at, state, actor, ""))
    return Revision(id=id_, created=at - 10, kind=RevisionKind.PROPOSAL, config=config or {"w": id_}, diff={},
                    parent=id_ - 1, trigger="period", evidence=Evidence(predicted_gain=predicted), events=events,
                    outcome=outcome)


def test_the_calibration_record_keeps_the_judged_changes_newest_first():
    # revision 5 not judged yet, 4 judged without a measure ("not judged"), 3 and 2 judged
    revs = [rev(5), rev(4, predicted=0.1), rev(3, 0.236, 0.0), rev(2, 0.024, -0.001), rev(1)]
    got = calibration(revs)
    assert got == [Calibrated(3, 0.236, 0.0), Calibrated(2, 0.024, -0.001)]
    assert [c.overshot for c in got] == [True, True]
    # a judged gain of half the predicted one or more meets it; a predicted loss never overshoots
    assert not Calibrated(1, 0.10, 0.05).overshot and Calibrated(1, 0.10, 0.049).overshot
    assert not Calibrated(1, -0.02, -0.5).overshot
    assert calibration(revs, last=1) == [Calibrated(3, 0.236, 0.0)]


def test_the_brake_holds_while_the_last_two_predictions_overshot():
    two = [Calibrated(3, 0.236, 0.0), Calibrated(2, 0.024, -0.001)]
    assert brake(two) == ("brake: the last 2 changes' predictions overshot (revision 3: +23.6% predicted, "
                          "+0.0% judged; revision 2: +2.4% predicted, -0.1% judged); auto mode proposes "
                          "until a judged change meets at least half its prediction")
    # one that met its prediction since: released; one record only: not yet; off with 0
    assert brake([Calibrated(4, 0.1, 0.08), *two]) == ""
    assert brake(two[:1]) == "" and brake(two, after=0) == ""


def test_a_rejected_config_cools_down():
    config = {"PriorityWeightFairshare": 0}
    revs = [rev(7, state=S.REJECTED, at=T, config=config),
            rev(6, state=S.REJECTED, actor="agent:auto", at=T, config={"x": 1})]
    hit = cooling(revs, config, T + 3600, cooldown=7 * 86400)
    assert hit is not None and hit.id == 7
    assert cooling(revs, config, T + 7 * 86400, cooldown=7 * 86400) is None  # cooled down
    assert cooling(revs, {"PriorityWeightFairshare": 5000}, T + 1, 86400) is None  # another config
    assert cooling(revs, {"x": 1}, T + 1, 86400) is None  # the agent's own refusal does not count
