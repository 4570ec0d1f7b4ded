"""The evidence and outcome of a revision have one contract (`autosched.live.store.Evidence` and
`JudgedOutcome`): what the agent writes round-trips through it with the same JSON keys, and the
service's view, the status page and the CLI read the same fields from it. Real agent rounds (the
fake connector, the real tuner and judge), the real store, the real CLI."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from html import escape

from typer.testing import CliRunner

from autosched.cli import build_app
from autosched.live.round import Action
from autosched.live.store import Evidence, JudgedOutcome, RevisionKind, RevisionStore
from autosched.service import views
from autosched.service.page import render
from live_helpers import HEADER, row
from test_live_agent import make

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
    # the CLI prints the same gain and spread, in percent
    assert (f"pending: revision {rev.id} (period), predicted avg_jct gain "
            f"{ev.predicted_gain:+.1%} ± {ev.spread:.1%} over 1 workload(s)") in status_text(agent)
    # the service: approved, the revision is one row of the outcomes plot with the same figures
    agent.approve(rev.id, "operator:alice")
    row_ = [o for o in views.outcomes(agent.store.history()) if o.revision == rev.id]
    assert len(row_) == 1
    assert (row_[0].predicted_gain, row_[0].spread) == (ev.predicted_gain, ev.spread)
    assert row_[0].observed_gain is None and row_[0].outcome is None  # not judged yet


def judged(tmp_path, after_s: float):
    """A change (predicted +10%) applied, then judged one period on: before, 10 jobs of 200 s;
    after, 10 jobs of `after_s`."""
    agent, fake = make(tmp_path)
    p = agent.store.create(dict(agent._running_or_baseline().config, PriorityWeightAge=77),
                           trigger="period", actor="t",
                           evidence=Evidence(predicted_gain=0.1, spread=0.02, samples=4))
    agent.approve(p.id, "operator:alice")
    t = agent.store.get(p.id).applied_at
    rows = [HEADER]
    for i in range(10):
        rows.append(row(f"b{i}", t - 500 + i, t - 500 + i, t - 300 + i, 1))
        rows.append(row(f"a{i}", t + 10 + i, t + 10 + i, t + 10 + after_s + i, 1))
    fake.update(sacct="\n".join(rows) + "\n", clock=t + 1800)
    agent.step()
    return agent, agent.store.get(p.id)


def test_an_outcome_the_judge_writes_round_trips_and_every_reader_sees_the_same_gain(tmp_path):
    agent, rev = judged(tmp_path, after_s=100)
    raw = stored(agent.store, "SELECT outcome FROM outcomes WHERE rev_id = ?", rev.id)
    assert set(raw) == {f.name for f in dataclasses.fields(JudgedOutcome)}
    out = rev.outcome
    assert out.to_dict() == raw and JudgedOutcome.from_dict(raw) == out
    # worked by hand: average JCT 200 s -> 100 s is (200 - 100) / 200 = +50%
    assert out.observed_gain == 0.5 and out.predicted_gain == 0.1 and out.metric == "avg_jct"
    assert out.verdict == "kept: avg_jct 200.0 -> 100.0 (+50.0%)"
    assert out.before["jobs"] == 10 and out.after["jobs"] == 10
    row_ = [o for o in views.outcomes(agent.store.history()) if o.revision == rev.id][0]
    assert (row_.predicted_gain, row_.spread, row_.observed_gain) == (0.1, 0.02, 0.5)
    assert f"; outcome: {out.verdict}" in status_text(agent)
    html = render(views.status(agent.store, agent), agent.store.history(),
                  views.outcomes(agent.store.history()), state_dir=str(agent.state_dir))
    assert f'<td title="{escape(out.verdict)}">+50.0%</td>' in html


def test_a_worse_change_is_rolled_back_with_its_outcome_and_the_rollback_says_what_it_undid(tmp_path):
    agent, rev = judged(tmp_path, after_s=1000)
    out = rev.outcome
    assert out.to_dict() == stored(agent.store, "SELECT outcome FROM outcomes WHERE rev_id = ?", rev.id)
    # by hand: 200 s -> 1000 s is (200 - 1000) / 200 = -400%
    assert out.observed_gain == -4.0
    assert out.verdict == "worse: avg_jct 200.0 -> 1000.0 (-400.0%, margin 0.0%); rolled back"
    back = agent.store.running()
    assert back.trigger == "rollback to 1" and back.kind is RevisionKind.ROLLBACK
    # no tuning figures: every field None but the two a rollback has
    assert back.evidence == Evidence(rollback_of=rev.id, to=1)


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
    assert rev.outcome == JudgedOutcome("", {}, {}, None, "kept", None)
    row_ = views.outcomes(store.history())[-1]
    assert (row_.predicted_gain, row_.spread, row_.observed_gain) == (0.08, None, None)
    assert JudgedOutcome.from_dict(None) is None and JudgedOutcome.from_dict({}) is None
    # a gain that is not a finite number is no gain
    assert Evidence.from_dict({"predicted_gain": "big", "spread": True}).predicted_gain is None
    assert Evidence.from_dict({"spread": True}).spread is None


def test_the_cli_says_unknown_for_a_proposal_without_a_predicted_gain(tmp_path):
    agent, _ = make(tmp_path)
    agent.store.create(dict(agent._running_or_baseline().config, PriorityWeightAge=77),
                       trigger="manual", actor="operator:bob")
    text = status_text(agent)
    assert "pending: revision 2 (manual), predicted gain unknown\n" in text
    assert "+0.0%" not in text
