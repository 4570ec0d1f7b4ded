"""A round's rules without a store or a cluster: `decide` on hand-made observations (revisions,
flags, sacct histories and the judge's replays written out here), the judge's figures and
decisions worked out by hand, the back-off,
the exit codes, and the stored summary's keys against rounds an older version recorded."""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.live.history import read_jobs
from autosched.live.judge import Counterfactual, PeriodFigures
from autosched.live.records import (
    Event,
    Evidence,
    Flags,
    HistoryCounts,
    JudgedOutcome,
    Revision,
    RevisionKind,
    RevisionState,
    RoundRecord,
    StoredRound,
)
from autosched.live.round import (
    EXIT_BLOCKED,
    EXIT_FAILED,
    EXIT_FROZEN,
    EXIT_OK,
    EXIT_RETRYING,
    Action,
    Block,
    Observed,
    RollBack,
    RoundOutcome,
    RoundRules,
    Stop,
    Tune,
    decide,
    next_retry,
)
from autosched.live.twin import ClusterSetup
from live_helpers import HEADER, row

A, P = RevisionState.APPLIED, RevisionState.PROPOSED
K = RevisionKind
RULES = RoundRules(period=600.0, history=3600.0, min_jobs=10, metric="avg_jct", rollback_margin=0.05,
                   max_twin_error=0.25)
T = 1_800_000_000.0  # when the running revision went live
SETUP = ClusterSetup((("n1", 8), ("n2", 8)))


def rev(id_, kind=K.PROPOSAL, applied=T, parent=1, outcome=None, gain=None, state=A):
    born = P if kind in (K.PROPOSAL, K.ROLLBACK) else A
    events = [Event(applied - 5 if born is P else applied, born, "t", "")]
    if state is not events[0].state:
        events.append(Event(applied, state, "t", ""))
    return Revision(id=id_, created=applied - 5, kind=kind, config={"w": id_}, diff={}, parent=parent,
                    trigger="t", evidence=Evidence(predicted_gain=gain), events=tuple(events),
                    outcome=outcome)


def history(before_s: float, after_s: float, n: int = 10):
    """`n` jobs finished in the period before T, each `before_s` long, and `n` in the period
    after, `after_s` long (all start on submission)."""
    rows = [HEADER]
    for i in range(n):
        rows.append(row(f"b{i}", T - 500 + i, T - 500 + i, T - 500 + i + before_s, 1))
        rows.append(row(f"a{i}", T + 10 + i, T + 10 + i, T + 10 + i + after_s, 1))
    return read_jobs("\n".join(rows) + "\n")


def seen(**kw):
    base = dict(now=T + 700, trigger="period", flags=Flags(), running=rev(2), setup=SETUP,
                jobs=history(100, 100, n=10))
    return Observed(**{**base, **kw})


def test_a_failed_read_stops_the_round_with_its_retry():
    plan = decide(seen(block=Block("Slurm does not answer: x", 60.0), running=None, jobs=None), RULES, T)
    assert plan == Stop(Action.BLOCKED, "Slurm does not answer: x", 60.0, blocked="Slurm does not answer: x")


def test_frozen_stops_before_anything_else_is_looked_at():
    plan = decide(seen(flags=Flags(frozen=True, frozen_by="operator:bob", frozen_reason="drill"),
                       running=None, jobs=None), RULES, T)
    assert plan == Stop(Action.FROZEN, "frozen by operator:bob: drill")


def test_a_hand_edit_blocks_until_an_operator_acts():
    plan = decide(seen(hand_edits="PriorityWeightAge is 7 live, 1000 in revision 2", jobs=None), RULES, T)
    why = ("hand edit: PriorityWeightAge is 7 live, 1000 in revision 2; the agent proposes nothing "
           "until the edit is adopted or undone")
    assert plan == Stop(Action.BLOCKED, why, None, blocked=why)


def replay(real: float, old: float, new: float, jobs: int = 10, unfinished: int = 0,
           queue: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> Counterfactual:
    """The judge's replay of the period after T: average JCTs `real` (as it went), `old` and
    `new` (the twin under the config before the change and under the change)."""
    fig = [PeriodFigures(jobs, jobs - unfinished, v, q) for v, q in zip((real, old, new), queue)]
    return Counterfactual(T, T + 600, *fig, running_at_change=1, queued_at_change=2, imputed=0)


def with_copies(cf: Counterfactual, *new: float) -> Counterfactual:
    """`cf` with jittered copies in which the twin gives 100 s under the old config and each of
    `new` under the new one."""
    fig = [(PeriodFigures(10, 10, 100.0, 1.0), PeriodFigures(10, 10, n, 1.0)) for n in new]
    return replace(cf, copies=tuple(fig))


def test_the_mean_over_the_replays_rolls_back_where_the_recorded_replay_alone_would_not():
    # recorded 100 -> 104 s (-4%, inside the 5% margin); four copies 100 -> 110 s (-10%): the
    # mean is (-4 - 4 * 10) / 5 = -8.8%, beyond the margin. The sd of -4, -10, -10, -10, -10
    # (mean -8.8; squares 4.8^2 + 4 * 1.2^2 = 28.8; / 4 = 7.2) is 2.683%. The twin error:
    # 4% recorded, 10% in each copy: 8.8% on average
    alone = decide(seen(running=rev(2, gain=0.1), counterfactual=replay(100, 100, 104)), RULES, T + 700)
    assert isinstance(alone, Tune)
    cf = with_copies(replay(100, 100, 104), 110, 110, 110, 110)
    plan = decide(seen(running=rev(2, gain=0.1), counterfactual=cf), RULES, T + 700)
    assert isinstance(plan, RollBack) and plan.to == 1
    assert plan.why == ("worse: avg_jct 100.0 -> 104.0 s in the twin on the recorded times (-4.0%), "
                        "-8.8% ± 2.7% (range -10.0% to -4.0%, 5 replays) with submit times jittered "
                        "(judged 10 jobs: 10 finished, 0 censored at 2027-01-15T08:10:00Z), margin 5.0%; twin error 8.8% "
                        "(mean of 5 replays); rolled back")
    j = plan.judged
    assert (j.counterfactual_gain, j.twin_error) == (pytest.approx(-0.088), pytest.approx(0.088))
    assert (j.gain_sd, j.gain_min, j.gain_max, j.replays) == (
        pytest.approx(math.sqrt(7.2) / 100), pytest.approx(-0.1), pytest.approx(-0.04), 5)
    assert j.simulated_new["avg_jct"] == 104  # the recorded times' replay
    assert j.copies == [[{"jobs": 10, "finished": 10, "avg_jct": 100.0, "avg_queue": 1.0},
                         {"jobs": 10, "finished": 10, "avg_jct": 110.0, "avg_queue": 1.0}]] * 4


def test_the_mean_over_the_replays_keeps_what_the_recorded_replay_alone_would_roll_back():
    # recorded 100 -> 120 s (-20%); four copies 100 -> 100 s (0%): -4% on average, kept. The
    # twin error: 20% recorded, 0 in the copies: 4% on average
    assert isinstance(decide(seen(counterfactual=replay(100, 100, 120)), RULES, T + 700), RollBack)
    plan = decide(seen(counterfactual=with_copies(replay(100, 100, 120), 100, 100, 100, 100)), RULES, T + 700)
    assert isinstance(plan, Tune)
    assert plan.judged.verdict == ("kept: avg_jct 100.0 -> 120.0 s in the twin on the recorded times "
                                   "(-20.0%), -4.0% ± 8.9% (range -20.0% to +0.0%, 5 replays) with "
                                   "submit times jittered (judged 10 jobs: 10 finished, 0 censored at 2027-01-15T08:10:00Z); "
                                   "twin error 4.0% (mean of 5 replays)")
    assert (plan.judged.counterfactual_gain, plan.judged.twin_error) == (pytest.approx(-0.04), pytest.approx(0.04))


def test_a_loss_within_the_replays_noise_rolls_nothing_back():
    # recorded 100 -> 83 s (+17%), four copies 100 -> 123, 120, 118, 125 s (-23, -20, -18, -25%):
    # the mean (17 - 86) / 5 = -13.8%, beyond the 5% margin. Their sd: deviations 30.8, -9.2,
    # -6.2, -4.2, -11.2, squares adding to 1214.8, / 4 = 303.7: 17.43%; its standard error over
    # 5 replays 7.79%. With k = 2 the loss is within 15.6% of 0: kept; with k = 0, rolled back.
    # The twin error against the cluster's 100 s: (17 + 23 + 20 + 18 + 25) / 5 = 20.6%
    cf = with_copies(replay(100, 100, 83), 123, 120, 118, 125)
    noisy = decide(seen(running=rev(2, gain=0.1), counterfactual=cf), replace(RULES, noise_k=2.0), T + 700)
    assert isinstance(noisy, Tune)
    assert noisy.judged.verdict.startswith("kept: a loss within the replays' noise: avg_jct 100.0 -> 83.0 s")
    assert noisy.judged.verdict.endswith(", 2 x s.e. 7.8%; twin error 20.6% (mean of 5 replays)")
    assert noisy.judged.counterfactual_gain == pytest.approx(-0.138)
    assert noisy.judged.gain_sd == pytest.approx(math.sqrt(303.7) / 100)
    assert isinstance(decide(seen(running=rev(2, gain=0.1), counterfactual=cf), RULES, T + 700), RollBack)
    # the same loss on consistent replays (all five at -13.8%) is rolled back at k = 2
    steady = with_copies(replay(100, 100, 113.8), 113.8, 113.8, 113.8, 113.8)
    plan = decide(seen(running=rev(2, gain=0.1), counterfactual=steady), replace(RULES, noise_k=2.0), T + 700)
    assert isinstance(plan, RollBack)


def test_the_twin_error_that_freezes_is_the_mean_over_the_replays():
    # recorded: the twin gives the cluster's 100 s (error 0); the copies give 140 s (40%):
    # (0 + 4 * 40) / 5 = 32% on average, over the 25% limit
    plan = decide(seen(counterfactual=with_copies(replay(100, 100, 100), 140, 140, 140, 140)), RULES, T + 700)
    assert isinstance(plan, Stop) and plan.action is Action.FROZEN
    assert plan.why.startswith("twin not trusted: it missed the cluster's 100.0 s by 32.0% on average "
                               "over 5 replays (avg_jct, over the 25% limit); ")
    assert plan.judged.twin_error == pytest.approx(0.32)


def test_a_worse_change_is_rolled_back_with_the_judges_figures():
    # the twin: 100 s -> 120 s, (100 - 120) / 100 = -20%, beyond the 5% margin; it gave 120 s
    # where the cluster had 125 s: error 5 / 125 = 4%
    plan = decide(seen(running=rev(2, gain=0.1), counterfactual=replay(125, 100, 120, unfinished=3)),
                  RULES, T + 700)
    assert isinstance(plan, RollBack) and plan.to == 1
    assert plan.why == ("worse: avg_jct 100.0 -> 120.0 s in the twin (-20.0%; judged 10 jobs: 7 finished, "
                        "3 censored at 2027-01-15T08:10:00Z), margin 5.0%; twin error 4.0%; rolled back")
    j = plan.judged
    assert (j.metric, j.predicted_gain, j.counterfactual_gain, j.twin_error) == (
        "avg_jct", 0.1, pytest.approx(-0.2), pytest.approx(0.04))
    assert (j.realized["avg_jct"], j.simulated_old["avg_jct"], j.simulated_new["avg_jct"]) == (125, 100, 120)
    assert (j.realized["jobs"], j.realized["finished"]) == (10, 7)
    assert j.period == {"start": T, "end": T + 600, "running_at_change": 1, "queued_at_change": 2,
                        "imputed": 0}


def test_the_judge_has_no_verdict_while_most_judged_jobs_are_unfinished():
    # 7 of 10 judged jobs unfinished at T + 600 (censored): the twin's 100 -> 130 s (-30%) and its
    # 30% error say nothing yet. No outcome is recorded, nothing is rolled back or tuned: the
    # judge waits, up to a period past the period (T + 1200)
    cf = replay(100, 100, 130, unfinished=7)
    plan = decide(seen(running=rev(2, gain=0.1), counterfactual=cf), RULES, T + 700)
    assert plan == Stop(Action.WAIT, "no verdict yet on revision 2: judged 10 jobs: 3 finished, 7 censored "
                        "at 2027-01-15T08:10:00Z; the judge waits for most to finish, until "
                        "2027-01-15T08:20:00Z at the latest", blocked="")
    # half finished (5 of 10): a verdict
    assert isinstance(decide(seen(counterfactual=replay(100, 100, 104, unfinished=5)), RULES, T + 700), Tune)
    # censored at the wait's end, still mostly unfinished: an outcome without a gain, the change
    # stands (no rollback, no freeze) and the round goes on
    late = replace(cf, end=T + 1200)
    plan = decide(seen(running=rev(2, gain=0.1), counterfactual=late), RULES, T + 1300)
    assert isinstance(plan, Tune) and plan.judged.counterfactual_gain is None and plan.judged.twin_error is None
    assert plan.judged.verdict == ("no verdict: judged 10 jobs: 3 finished, 7 censored at 2027-01-15T08:20:00Z, "
                                   "after waiting 600 s past the period; the queue outlasts it, the change stands")
    # when the judge censors: the round's time, at most the wait's end
    assert (RULES.censor_time(T, T + 700), RULES.censor_time(T, T + 5000)) == (T + 700, T + 1200)
    assert replace(RULES, verdict_wait=60.0).censor_time(T, T + 5000) == T + 660


def test_a_change_within_the_margin_is_kept_and_the_round_goes_on():
    # 100 s -> 104 s: -4%, inside the 5% margin; the twin's 104 s against the real 100 s: 4%
    plan = decide(seen(counterfactual=replay(100, 100, 104)), RULES, T + 700)
    assert isinstance(plan, Tune) and plan.running.id == 2
    assert plan.judged.verdict == ("kept: avg_jct 100.0 -> 104.0 s in the twin (-4.0%; judged 10 jobs: 10 "
                                   "finished, 0 censored at 2027-01-15T08:10:00Z); twin error 4.0%")


def test_a_twin_that_missed_the_period_freezes_the_agent_instead_of_deciding():
    # the twin gave 130 s where the cluster had 100 s: 30%, over the 25% limit. Its counterfactual
    # (-30%) would roll the change back; the agent freezes instead and says why.
    plan = decide(seen(running=rev(2, gain=0.1), counterfactual=replay(100, 100, 130)), RULES, T + 700)
    why = ("twin not trusted: it gave 130.0 s where the cluster had 100.0 s (avg_jct, error 30.0%, "
           "over the 25% limit); avg_jct 100.0 -> 130.0 s in the twin (-30.0%; judged 10 jobs: 10 "
           "finished, 0 censored at 2027-01-15T08:10:00Z); frozen instead of deciding")
    assert plan == Stop(Action.FROZEN, why, judged=plan.judged, freeze=why)
    assert (plan.judged.counterfactual_gain, plan.judged.twin_error) == (pytest.approx(-0.3), pytest.approx(0.3))
    # at the limit the twin is trusted: 125 s against 100 s is 25%, and -25% rolls back
    assert isinstance(decide(seen(counterfactual=replay(100, 100, 125)), RULES, T + 700), RollBack)


def test_the_judge_measures_the_agents_metric_when_it_can():
    rules = RoundRules(600, 3600, 10, "avg_queue", 0.05, 0.25)
    # waits: realized 50, old 40, new 50 -> -25%, twin error 0; the JCTs (all 100) would keep it
    plan = decide(seen(counterfactual=replay(100, 100, 100, queue=(50, 40, 50))), rules, T + 700)
    assert isinstance(plan, RollBack)
    assert (plan.judged.metric, plan.judged.counterfactual_gain) == ("avg_queue", pytest.approx(-0.25))
    # a metric the judge does not measure (a tail) is judged on the average JCT
    rules = RoundRules(600, 3600, 10, "p99_jct", 0.05, 0.25)
    plan = decide(seen(counterfactual=replay(100, 100, 100, queue=(50, 40, 50))), rules, T + 700)
    assert plan.judged.metric == "avg_jct" and plan.judged.counterfactual_gain == 0.0


def test_a_period_the_judge_could_not_replay_is_recorded_as_not_judged():
    plan = decide(seen(unjudged="the twin could not replay the period: x"), RULES, T + 700)
    assert isinstance(plan, Tune)
    assert plan.judged == JudgedOutcome("avg_jct", None, "not judged: the twin could not replay the "
                                        "period: x")
    plan = decide(seen(counterfactual=replay(0, 0, 0, jobs=0)), RULES, T + 700)
    assert plan.judged.verdict == "not judged: no job was queued at the change or submitted in the period"
    assert plan.judged.counterfactual_gain is None and plan.judged.twin_error is None


def test_the_judge_waits_a_period_and_judges_once():
    cf = replay(100, 100, 200)
    # less than a period after the change: nothing judged, whatever a replay says
    assert decide(seen(counterfactual=cf, now=T + 599), RULES, T + 599).judged is None
    # judged already: the record stands (and, trusted and worse, the rollback is tried again)
    kept = JudgedOutcome("avg_jct", 0.1, "kept", 0.01, 0.02)
    assert decide(seen(running=rev(2, outcome=kept), counterfactual=cf), RULES, T + 700).judged is None
    # the baseline and an adopted config are not changes the agent judges
    for r in (rev(1, kind=K.BASELINE, parent=None), rev(2, kind=K.ADOPTED)):
        assert decide(seen(running=r, counterfactual=cf), RULES, T + 700).judged is None


def test_a_round_tunes_on_the_setup_it_read_and_never_without_one():
    plan = decide(seen(), RULES, T + 700)
    assert isinstance(plan, Tune) and plan.setup is SETUP
    # the judge's record is kept when the round stops short of tuning
    plan = decide(seen(setup=None, counterfactual=replay(100, 100, 104)), RULES, T + 700)
    why = "the round read no cluster setup to simulate"
    assert plan == Stop(Action.BLOCKED, why, blocked=why, judged=plan.judged)
    assert plan.judged.verdict.startswith("kept: avg_jct 100.0 -> 104.0 s in the twin")


def test_a_rollback_that_failed_is_tried_again_at_the_next_round():
    worse = JudgedOutcome("avg_jct", 0.1, "worse: ...; rolled back", -0.2, 0.1)
    plan = decide(seen(running=rev(2, outcome=worse)), RULES, T + 700)
    assert plan == RollBack(1, "worse: ...; rolled back", None)
    # a rollback itself is never rolled back by the guard, and the baseline has no parent
    assert isinstance(decide(seen(running=rev(3, kind=K.ROLLBACK, parent=2, outcome=worse)), RULES, T + 700), Tune)
    kept = JudgedOutcome("avg_jct", 0.1, "kept", -0.01, 0.1)
    assert isinstance(decide(seen(running=rev(2, outcome=kept)), RULES, T + 700), Tune)
    # a period the twin missed (the agent froze; an operator unfroze it) decides nothing later
    untrusted = JudgedOutcome("avg_jct", 0.1, "twin not trusted: ...", -0.2, 0.3)
    assert isinstance(decide(seen(running=rev(2, outcome=untrusted)), RULES, T + 700), Tune)
    # nor does an outcome an older version recorded (a before/after comparison, no twin error)
    old = JudgedOutcome.from_dict({"metric": "avg_jct", "before": {}, "after": {}, "verdict": "worse",
                                   "observed_gain": -0.5, "predicted_gain": 0.1})
    assert old == JudgedOutcome("avg_jct", 0.1, "worse")
    assert isinstance(decide(seen(running=rev(2, outcome=old)), RULES, T + 700), Tune)


def test_one_change_per_period_counts_an_adopted_config_but_not_the_baseline():
    for kind in (K.PROPOSAL, K.ROLLBACK, K.ADOPTED):
        plan = decide(seen(running=rev(2, kind=kind)), RULES, T + 100)
        assert plan == Stop(Action.WAIT, "revision 2 went live 100 s ago; at most one change per "
                                         "period (600 s)", blocked=""), kind
    base = rev(1, kind=K.BASELINE, parent=None)
    assert isinstance(decide(seen(running=base, now=T + 100, jobs=history(100, 100, n=10)), RULES, T + 100), Tune)


def test_an_open_proposal_waits_for_approval():
    plan = decide(seen(pending=rev(3, state=P)), RULES, T + 700)
    assert plan.action is Action.WAIT and plan.why == "revision 3 is proposed and awaits approval"


def test_too_little_history_is_said_with_the_counts():
    # 20 jobs finished; the rule wants 25 within the last 3600 s
    plan = decide(seen(running=rev(1, kind=K.BASELINE, parent=None)), RoundRules(600, 3600, 25, "avg_jct", 0.05, 0.25),
                  T + 700)
    why = ("too little history: 20 jobs finished in the last 1h (3600 s), 25 needed to fit a workload "
           "model; nothing proposed")
    assert plan == Stop(Action.BLOCKED, why, None, blocked=why)


def test_the_back_off_doubles_up_to_a_period():
    waits, prev = [], None
    for _ in range(7):
        prev = next_retry(prev, 600.0)
        waits.append(prev)
    assert waits == [30.0, 60.0, 120.0, 240.0, 480.0, 600.0, 600.0]
    assert next_retry(None, 20.0) == 20.0


@pytest.mark.parametrize("out, code", [
    (RoundOutcome(Action.PROPOSED, "", revision=2), EXIT_OK),
    (RoundOutcome(Action.WAIT, ""), EXIT_OK),
    (RoundOutcome(Action.NONE, ""), EXIT_OK),
    (RoundOutcome(Action.ROLLED_BACK, ""), EXIT_OK),
    (RoundOutcome(Action.FROZEN, ""), EXIT_FROZEN),
    (RoundOutcome(Action.BLOCKED, "", retry_after=30.0), EXIT_RETRYING),
    (RoundOutcome(Action.BLOCKED, ""), EXIT_BLOCKED),
    (RoundOutcome(Action.APPLY_FAILED, ""), EXIT_FAILED),
    (RoundOutcome(Action.ROLLBACK_FAILED, "", retry_after=30.0), EXIT_FAILED),
    (RoundOutcome(Action.TUNING_FAILED, ""), EXIT_FAILED),
])
def test_exit_codes(out, code):
    assert out.exit_code == code
    assert (EXIT_OK, EXIT_FROZEN, EXIT_RETRYING, EXIT_BLOCKED, EXIT_FAILED) == (0, 3, 4, 5, 6)


def test_the_stored_summary_keeps_the_keys_older_rounds_have():
    """The rounds tests/fixtures/state-v0 recorded (the code before typed rounds) have the keys
    the same rounds have now."""
    db = sqlite3.connect(f"file:{Path(__file__).parent / 'fixtures' / 'state-v0' / 'state.db'}?mode=ro", uri=True)
    old = {}
    for (text,) in db.execute("SELECT summary FROM rounds"):
        d = json.loads(text)
        old[d["action"]] = set(d)
    db.close()
    counts = HistoryCounts(60, 60, 0)
    now = {
        "proposed": RoundOutcome(Action.PROPOSED, "gain", revision=2, history=counts),
        "wait": RoundOutcome(Action.WAIT, "w", history=counts),
        "none": RoundOutcome(Action.NONE, "n", evidence=Evidence(), history=counts),
        "blocked": RoundOutcome(Action.BLOCKED, "hand edit"),
        "frozen": RoundOutcome(Action.FROZEN, "frozen by"),
    }
    # every old key is kept; a round that read the history adds the jobs the twin left out, one
    # that read the cluster's setup adds it and what changed in it
    new = {"proposed": {"left_out"}, "wait": {"left_out"}, "none": {"left_out"}, "blocked": set(), "frozen": set()}
    assert {a: set(o.to_summary()) for a, o in now.items()} == {a: old[a] | new[a] for a in old}
    read = RoundOutcome(Action.WAIT, "w", history=HistoryCounts(60, 60, 0, {"more GPUs than its partition has": 1}),
                        setup=SETUP, setup_changes=("node n2 added (8)",)).to_summary()
    assert set(read) == old["wait"] | {"left_out", "setup", "setup_changes"}
    assert (read["left_out"], read["setup_changes"]) == ({"more GPUs than its partition has": 1}, ["node n2 added (8)"])
    assert ClusterSetup.from_dict(read["setup"]) == SETUP
    assert {a.value for a in Action} >= set(old)
    # read back: a row with keys missing or of another type reads as empty
    assert StoredRound.from_row(5, {"action": "wait", "why": "w", "trigger": "period", "revision": True}) == \
        StoredRound(5.0, "period", "wait", "w")
    assert StoredRound.from_row(5, {}) == StoredRound(5.0, "", "", "") == StoredRound.from_row(5, "not an object")
    assert StoredRound.from_row(5, {}).brief() == RoundRecord(5.0, "", "", "", None, None)


ROWS = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "round_rows.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("row", ROWS, ids=[r["commit"] for r in ROWS])
def test_a_round_row_of_every_version_reads_back_typed(row):
    """tests/fixtures/round_rows.jsonl: one row as each version that changed what a round writes
    wrote it (tests/fixtures/make_round_row.py), every field that version had set. Each reads
    back with the values it was written with (by hand, from make_round_row.py), and is written
    again under the same keys with the same values (a key added since reads as empty)."""
    summary = row["summary"]
    got = StoredRound.from_row(7.0, summary)
    assert (got.time, got.trigger, got.action, got.why) == (7.0, "drift: arrival rate x3.00", "proposed", "predicted +12.0%")
    assert (got.revision, got.retry_after) == (2, 60.0)
    assert got.evidence == Evidence(predicted_gain=0.12, spread=0.02, samples=4, metric="avg_jct")
    left = {"more GPUs than its partition has": 2} if "left_out" in summary else {}
    assert got.history == HistoryCounts(60, 55, 1, left)
    if "setup" in summary:
        assert got.setup == ClusterSetup((("n1", 8), ("n2", 8)), source="fake") and not got.setup_error
        assert got.setup_changes == ("node n2 added (8)",)
    else:
        assert (got.setup, got.setup_changes) == (None, ())
    if "merged" in summary:
        assert got.merged == ("SchedulerParameters: slurm.conf's own entries (sched_interval=60) written",)
        assert got.shadowed == ("PriorityWeightAge=1000 in slurm.conf does not take effect",)
    else:
        assert (got.merged, got.shadowed) == (None, None)
    again = got.to_summary()
    assert set(again) - set(summary) <= {"left_out"}
    grown = ("evidence", "setup")
    assert {k: again[k] for k in summary if k not in grown} == {k: v for k, v in summary.items() if k not in grown}
    # the evidence and the setup have gained keys since (each None or 0 here)
    for key in (k for k in grown if k in summary):
        assert {k: again[key][k] for k in summary[key]} == summary[key]


def test_the_rounds_state_v0_recorded_read_back_typed():
    """The rounds of tests/fixtures/state-v0 (the code before typed rounds, 31d9366)."""
    db = sqlite3.connect(f"file:{Path(__file__).parent / 'fixtures' / 'state-v0' / 'state.db'}?mode=ro", uri=True)
    rows = db.execute("SELECT time, summary FROM rounds ORDER BY seq").fetchall()
    db.close()
    got = [StoredRound.from_row(t, json.loads(s)) for t, s in rows]
    assert [r.action for r in got] == [json.loads(s)["action"] for _, s in rows]
    for r, (_, s) in zip(got, rows):
        d = json.loads(s)
        assert r.why == d["why"] and r.trigger == d.get("trigger", "")
        assert (r.history is None) == ("history_jobs" not in d)
        assert (r.evidence is None) == ("evidence" not in d) and r.setup is None
        again = r.to_summary()
        assert {k: again[k] for k in d if k != "evidence"} == {k: v for k, v in d.items() if k != "evidence"}
        if "evidence" in d:
            assert {k: again["evidence"][k] for k in d["evidence"]} == d["evidence"]


def test_a_recorded_setup_that_is_not_one_reads_as_an_error_not_a_setup():
    got = StoredRound.from_row(1.0, {"action": "wait", "setup": {"nodes": "n1"}})
    assert got.setup is None and got.setup_error


@settings(max_examples=60, deadline=None)
@given(st.builds(RoundOutcome, action=st.sampled_from(list(Action)), why=st.text(max_size=20),
                 trigger=st.text(max_size=20), revision=st.none() | st.integers(1, 10**6),
                 retry_after=st.none() | st.floats(0, 1e6),
                 history=st.none() | st.builds(HistoryCounts, st.integers(0, 10**6), st.integers(0, 10**6),
                                               st.integers(0, 100), st.dictionaries(st.text(max_size=8), st.integers(0, 99), max_size=3)),
                 evidence=st.none() | st.builds(Evidence, predicted_gain=st.none() | st.floats(-1, 1), samples=st.none() | st.integers(0, 9)),
                 setup=st.none() | st.just(SETUP), setup_changes=st.lists(st.text(max_size=9), max_size=2).map(tuple),
                 merged=st.none() | st.lists(st.text(max_size=9), min_size=1, max_size=2).map(tuple),
                 shadowed=st.none() | st.lists(st.text(max_size=9), max_size=2).map(tuple)))
def test_every_round_reads_back_as_it_was_recorded(out):
    """The encoder and the one decoder agree (through JSON, as the store keeps it)."""
    back = StoredRound.from_row(3.0, json.loads(json.dumps(out.to_summary())))
    want = out.stored(3.0)
    if want.setup is None:  # what changed in a setup is recorded with the setup
        want = replace(want, setup_changes=())
    assert back == want
