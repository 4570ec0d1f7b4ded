"""The evidence and outcome of a revision have one contract (`autosched.live.store.Evidence` and
`JudgedOutcome`): what the agent writes round-trips through it with the same JSON keys, and the
service's view, the status page and the CLI read the same fields from it. Real agent rounds (the
fake connector, the real tuner and judge), the real store, the real CLI."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from html import escape

import pytest
from typer.testing import CliRunner

from autosched.cli import build_app
from autosched.live.records import Evidence, JudgedOutcome, RevisionKind
from autosched.live.round import Action
from autosched.live.store import RevisionStore
from autosched.service import views
from autosched.service.page import render
from live_helpers import SMALL_FIRST, apply_change, make, period_rows

runner = CliRunner()


def status_text(agent) -> str:
    r = runner.invoke(build_app(), ["agent", "status", "--state", str(agent.state_dir)])
    assert r.exit_code == 0, r.output
    return r.output


def stored(store: RevisionStore, sql: str, rev_id: int) -> dict:
    """A revision's JSON column as the store holds it."""
    with sqlite3.connect(store.path) as db:
        return json.loads(db.execute(sql, (rev_id,)).fetchone()[0])


def test_a_proposal_the_agent_writes_round_trips_and_every_reader_sees_the_same_figures(tmp_path):
    agent, _ = make(tmp_path)
    out = agent.step()
    assert out.action is Action.PROPOSED, out
    rev = agent.store.get(out.revision)
    raw = stored(agent.store, "SELECT evidence FROM revisions WHERE id = ?", rev.id)
    # every field of the contract is stored, under its own name, and nothing else
    assert set(raw) == {f.name for f in dataclasses.fields(Evidence)}
    ev = rev.evidence
    assert ev.to_dict() == raw and Evidence.from_dict(raw) == ev
    assert ev.predicted_gain == raw["predicted_gain"] and ev.predicted_gain > 0
    assert ev.samples == 1 and ev.metric == "avg_jct" and ev.model == "replay"
    # the CLI prints the same gain, in percent; one workload has no spread to show ("± 0.0%")
    assert (f"pending: revision {rev.id} (period), predicted avg_jct gain "
            f"{ev.predicted_gain:+.1%} (one workload: no spread measured)\n") in status_text(agent)
    # the service: approved, the revision is one row of the outcomes plot with the same figures
    agent.approve(rev.id, "operator:alice")
    row_ = [o for o in views.outcomes(agent.store.history()) if o.revision == rev.id]
    assert len(row_) == 1
    assert (row_[0].predicted_gain, row_[0].spread) == (ev.predicted_gain, ev.spread)
    assert (row_[0].counterfactual_gain, row_[0].twin_error, row_[0].outcome) == (None, None, None)  # not judged yet


def judged(tmp_path):
    """A change (predicted +10%: small jobs first) applied, then judged one period on: the
    period's jobs as test_live_agent.py's judge tests have them (+26.7% in the twin, error 0)."""
    agent, fake = make(tmp_path)
    at = apply_change(agent, SMALL_FIRST)
    fake.update(sacct=period_rows(int(at), small_first=True), clock=at + 700)
    agent.step()
    return agent, agent.store.get(2)


def test_an_outcome_the_judge_writes_round_trips_and_every_reader_sees_the_same_figures(tmp_path):
    agent, rev = judged(tmp_path)
    raw = stored(agent.store, "SELECT outcome FROM outcomes WHERE rev_id = ?", rev.id)
    assert set(raw) == {f.name for f in dataclasses.fields(JudgedOutcome)}
    out = rev.outcome
    assert out.to_dict() == raw and JudgedOutcome.from_dict(raw) == out
    # +26.7% on the recorded times, the jittered copies within 0.5% of it (test_live_agent.py)
    assert (out.predicted_gain, out.counterfactual_gain, out.metric) == (
        0.1, pytest.approx(0.8 / 3, abs=0.005), "avg_jct")
    assert out.replays == 5 and out.gain_min <= out.counterfactual_gain <= out.gain_max
    gain = out.counterfactual_text()
    assert gain == (f"+26.{gain[4]}% ± {out.gain_sd:.1%} (range {out.gain_min:+.1%} to "
                    f"{out.gain_max:+.1%}, 5 replays)")
    err = f"{out.twin_error:.1%}"
    row_ = [o for o in views.outcomes(agent.store.history()) if o.revision == rev.id][0]
    assert (row_.predicted_gain, row_.counterfactual_gain, row_.twin_error) == (
        0.1, out.counterfactual_gain, out.twin_error)
    # the CLI: the three figures (the gain with its spread over the replays), the verdict, and
    # the outcome on the revision's history line
    text = status_text(agent)
    assert (f"judged: revision 2: predicted gain +10.0%, counterfactual gain {gain}, twin error "
            f"{err}\n  {out.verdict}\n") in text
    assert f"; outcome: {out.verdict}" in text
    st = json.loads(runner.invoke(build_app(), ["agent", "status", "--json", "--state",
                                                str(agent.state_dir)]).output)
    assert st["judged"] == {"revision": 2, "predicted_gain": 0.1,
                            "counterfactual_gain": out.counterfactual_gain,
                            "twin_error": out.twin_error, "verdict": out.verdict,
                            "gain_sd": out.gain_sd, "gain_min": out.gain_min,
                            "gain_max": out.gain_max, "replays": 5}
    html = render(views.status(agent.store, agent), agent.store.history(),
                  views.outcomes(agent.store.history()), state_dir=str(agent.state_dir))
    assert f'<td title="{escape(out.verdict)}">{escape(gain)}</td><td>{err}</td>' in html
    assert ("revision 2: predicted gain <span id=judged-predicted>+10.0%</span>, counterfactual "
            f"gain <span id=judged-counterfactual>{escape(gain)}</span>, twin error <span "
            f"id=judged-twin-error>{err}</span>") in html


def test_a_worse_change_is_rolled_back_with_its_outcome_and_the_rollback_says_what_it_undid(tmp_path):
    agent, fake = make(tmp_path)
    apply_change(agent, SMALL_FIRST)
    at = apply_change(agent, agent.store.get(1).config)
    fake.update(sacct=period_rows(int(at), small_first=False), clock=at + 700)
    agent.step()
    rev = agent.store.get(3)
    out = rev.outcome
    assert out.to_dict() == stored(agent.store, "SELECT outcome FROM outcomes WHERE rev_id = ?", rev.id)
    assert out.verdict.endswith(f"margin 0.0%; twin error {out.twin_error:.1%} (mean of 5 replays); "
                                "rolled back")
    back = agent.store.running()
    assert back.trigger == "rollback to 2" and back.kind is RevisionKind.ROLLBACK
    # no tuning figures: every field None but the two a rollback has
    assert back.evidence == Evidence(rollback_of=rev.id, to=2)


def test_stored_rows_written_before_the_contract_still_read(tmp_path):
    """Rows as any version stored them: extra keys are ignored, missing ones read as None, and the
    key "gain" (which no version of the agent wrote) is not an observed gain."""
    store = RevisionStore(tmp_path)
    store.create({"PriorityWeightAge": 1000}, kind=RevisionKind.ADOPTED, trigger="adopted",
                 actor="agent")
    rev = store.create({"PriorityWeightAge": 2000}, kind=RevisionKind.ADOPTED, trigger="adopted",
                       actor="t")
    with sqlite3.connect(store.path) as db:  # as an older version wrote them
        db.execute("UPDATE revisions SET evidence = ? WHERE id = ?",
                   (json.dumps({"predicted_gain": 0.08, "objective": "x", "samples": "8"}), rev.id))
        db.execute("INSERT INTO outcomes (rev_id, time, outcome) VALUES (?, 0, ?)",
                   (rev.id, json.dumps({"gain": 0.3, "verdict": "kept", "before": [1]})))
    rev = store.get(rev.id)
    assert rev.evidence == Evidence(predicted_gain=0.08)  # "8" is no count
    assert rev.outcome == JudgedOutcome("", None, "kept")
    row_ = views.outcomes(store.history())[-1]
    assert (row_.predicted_gain, row_.spread, row_.counterfactual_gain) == (0.08, None, None)
    assert JudgedOutcome.from_dict(None) is None and JudgedOutcome.from_dict({}) is None
    # a gain that is not a finite number is no gain
    assert Evidence.from_dict({"predicted_gain": "big", "spread": True}).predicted_gain is None
    assert Evidence.from_dict({"spread": True}).spread is None


def test_the_cli_says_unknown_for_a_proposal_without_a_predicted_gain(tmp_path):
    agent, _ = make(tmp_path)
    agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=77),
                       trigger="manual", actor="operator:bob")
    text = status_text(agent)
    assert "pending: revision 2 (manual), predicted gain unknown\n" in text
    assert "+0.0%" not in text
