"""The service's JSON API over a real socket, driven by `autosched.client`: every endpoint, the
401/404/409/422 paths (and that nothing changed after them), the token file, the Host check."""

from __future__ import annotations

import os
import stat
import urllib.error
import urllib.request

import pytest

from autosched.client import Client, Conflict, NotFound, ServiceError, Unauthorized
from autosched.errors import InputError
from autosched.live.records import Evidence, JudgedOutcome
from autosched.live.store import RevisionStore
from autosched.service.token import load_or_create_token
from service_kit import BASE, TOKEN, live_values, make_app, seed, serve_in_thread


@pytest.fixture
def svc(tmp_path):
    """(client with the token, client without, store) over a freshly seeded store."""
    store = seed(tmp_path / "state")
    with serve_in_thread(make_app(tmp_path / "state")) as url:
        yield Client(url, token=TOKEN), Client(url), store


def snapshot(store: RevisionStore):
    return [r.to_dict() for r in store.history()], store.flags()


def test_status_revisions_proposals(svc):
    c, anon, _ = svc
    st = anon.status()
    assert st["running"]["id"] == 1 and st["running"]["state"] == "applied"
    assert st["running"]["config"] == BASE
    assert st["running"]["slurm"]["PriorityMaxAge"] == "7-0"  # as slurm.conf says it
    assert st["pending"]["slurm"]["PriorityWeightAge"] == "5000"
    assert st["pending"]["id"] == 2 and st["pending"]["diff"] == {"PriorityWeightAge": [1000, 5000]}
    # typed: every key of the contract, the ones the agent did not record as null
    assert st["pending"]["evidence"] == Evidence(predicted_gain=0.08, spread=0.02, samples=8,
                                                 metric="avg_jct").to_dict()
    assert (st["mode"], st["policy"], st["period"], st["connector"]["kind"]) == (
        "propose", "multifactor", 3600.0, "fake")
    assert (st["frozen"], st["blocked"], st["agent_error"], st["interrupted_apply"]) == (
        False, "", "", None)
    assert st["revisions"] == 2 and [r["id"] for r in st["history"]] == [2, 1]
    assert (st["last_round"], st["next_round"]) == (None, None)
    assert [r["id"] for r in anon._call("GET", "/api/status?history=1")["history"]] == [2]
    assert [r["id"] for r in anon.revisions()] == [2, 1]
    assert [r["id"] for r in anon.revisions(limit=1)] == [2]
    r1 = anon.revision(1)
    assert r1["diff"] == {k: [None, v] for k, v in BASE.items()} and r1["parent"] is None
    assert [(e["state"], e["actor"], e["note"]) for e in r1["events"]] == [
        ("applied", "agent", "the config found live")]
    assert [r["id"] for r in anon.proposals()] == [2]  # the baseline never was a proposal


def test_status_after_a_round(svc):
    _, anon, store = svc
    store.record_round({"action": "none", "why": "too little history: 3 finished jobs"},
                       when=1_000_000.0)
    st = anon.status()
    assert st["last_round"] == {"time": 1_000_000.0, "trigger": "", "action": "none",
                                "why": "too little history: 3 finished jobs", "revision": None,
                                "retry_after": None, "seconds": None}
    assert st["next_round"] == 1_003_600.0  # a period on
    store.record_round({"trigger": "period", "action": "blocked", "why": "Slurm does not answer",
                        "retry_after": 60.0}, when=1_000_100.0)
    st = anon.status()
    assert (st["last_round"]["retry_after"], st["next_round"]) == (60.0, 1_000_160.0)


def test_openapi_documents_every_endpoint(svc):
    spec = svc[1].openapi()
    assert set(spec["paths"]) == {
        "/api/status", "/api/revisions", "/api/revisions/{rev_id}", "/api/proposals",
        "/api/outcomes", "/api/revisions/{rev_id}/approve", "/api/revisions/{rev_id}/reject",
        "/api/rollback", "/api/freeze", "/api/unfreeze", "/api/revisions/{rev_id}/preview",
        "/metrics"}
    approve = spec["paths"]["/api/revisions/{rev_id}/approve"]["post"]
    assert {"401", "404", "409", "422"} <= set(approve["responses"])
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789abcdef", TOKEN + "x", ""])
def test_actions_without_the_token_are_401_and_change_nothing(svc, token):
    c, _, store = svc
    bad = Client(c.url, token=token)
    before = snapshot(store)
    for call in (lambda: bad.approve(2), lambda: bad.reject(2, "no"), lambda: bad.rollback(1),
                 lambda: bad.freeze("stop"), lambda: bad.unfreeze(), lambda: bad.approve(99)):
        with pytest.raises(Unauthorized, match="HTTP 401: a valid bearer token is required"):
            call()
    assert snapshot(store) == before


def test_raw_401_has_the_bearer_challenge(svc):
    req = urllib.request.Request(svc[0].url + "/api/freeze", data=b"{}", method="POST",
                                 headers={"Authorization": "Basic dXNlcjpwYXNz"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 401 and e.value.headers["WWW-Authenticate"] == "Bearer"


def test_approve_changes_the_running_revision(svc):
    c, anon, store = svc
    rev = c.approve(2, operator="alice")
    assert rev["id"] == 2 and rev["state"] == "applied"
    assert rev["events"][-1]["actor"] == "operator:alice" and rev["applied_at"] is not None
    assert store.running().id == 2 and store.pending() is None
    assert anon.status()["running"]["config"]["PriorityWeightAge"] == 5000
    assert live_values(store.state_dir)["PriorityWeightAge"] == "5000"  # the cluster runs it
    with pytest.raises(Conflict, match="HTTP 409: revision 2 is applied; only a proposed "
                                       "revision can be approved"):
        c.approve(2)
    with pytest.raises(Conflict, match="revision 1 is applied"):
        c.reject(1)


def test_unknown_revision_is_404_and_changes_nothing(svc):
    c, anon, store = svc
    before = snapshot(store)
    with pytest.raises(NotFound, match="HTTP 404: no revision 99"):
        anon.revision(99)
    for call in (lambda: c.approve(99), lambda: c.reject(99), lambda: c.rollback(99)):
        with pytest.raises(NotFound, match="no revision 99"):
            call()
    assert snapshot(store) == before


def test_reject_with_reason_default_actor(svc):
    c, _, store = svc
    rev = c.reject(2, reason="too big a step")
    assert rev["state"] == "rejected"
    assert (rev["events"][-1]["actor"], rev["events"][-1]["note"]) == ("service:token",
                                                                      "too big a step")
    assert store.pending() is None and store.running().id == 1
    assert live_values(store.state_dir)["PriorityWeightAge"] == "1000"


def test_freeze_blocks_approve_with_409_then_unfreeze(svc):
    c, anon, store = svc
    flags = c.freeze("maintenance window", operator="bob")
    assert flags == {"frozen": True, "frozen_reason": "maintenance window",
                     "frozen_by": "operator:bob", "blocked": ""}
    st = anon.status()
    assert (st["frozen"], st["frozen_reason"], st["frozen_by"]) == (True, "maintenance window",
                                                                    "operator:bob")
    with pytest.raises(Conflict, match="HTTP 409: the agent is frozen by operator:bob: "
                                       "maintenance window; unfreeze it first"):
        c.approve(2)
    assert store.pending().id == 2 and live_values(store.state_dir)["PriorityWeightAge"] == "1000"
    assert c.unfreeze()["frozen"] is False
    assert c.approve(2)["state"] == "applied"


def test_rollback_to_previous_and_named_revision(svc):
    c, anon, store = svc
    with pytest.raises(Conflict, match="revision 1 is the only one ever applied; there is "
                                       "nothing to roll back to"):
        c.rollback()
    c.approve(2)
    rev = c.rollback(operator="alice")
    assert rev["id"] == 3 and rev["config"] == BASE and rev["trigger"] == "rollback to 1"
    assert rev["diff"] == {"PriorityWeightAge": [5000, 1000]} and rev["parent"] == 2
    assert rev["events"][-1]["actor"] == "operator:alice"
    assert store.get(2).state.value == "rolled_back" and store.running().id == 3
    assert anon.status()["running"]["id"] == 3
    assert live_values(store.state_dir)["PriorityWeightAge"] == "1000"
    with pytest.raises(Conflict, match="revision 3 is already running"):
        c.rollback(3)
    with pytest.raises(NotFound, match="no revision 4"):
        c.rollback(4)
    assert [r["id"] for r in anon.proposals()] == [2]  # a rollback is no proposal


def test_slurm_down_is_503_and_nothing_applied(svc):
    from autosched.live.fake import FakeConnector

    c, anon, store = svc
    fake = FakeConnector(store.state_dir.parent / "fake")
    fake.update(down=True)
    before = snapshot(store)
    with pytest.raises(ServiceError, match="HTTP 503: .*could not reach Slurm: fake cluster is "
                                           "down") as e:
        c.approve(2)
    assert e.value.status == 503 and snapshot(store) == before
    assert anon.status()["running"]["id"] == 1  # reads go on from the store
    fake.update(down=False)
    assert c.approve(2)["state"] == "applied"


def test_hand_edit_blocks_approve_with_409(svc):
    from autosched.live.fake import FakeConnector

    c, _, store = svc
    FakeConnector(store.state_dir.parent / "fake").hand_edit("PriorityWeightAge", "777")
    with pytest.raises(Conflict, match="HTTP 409: the live config differs from revision 1 "
                                       r"\(PriorityWeightAge is 777 live, 1000 in revision 1\)"):
        c.approve(2)
    assert store.pending().id == 2 and store.running().id == 1
    done = c.approve(2, force=True)  # forced: applied, and the discarded value recorded
    assert done["state"] == "applied" and done["overridden"] == [
        {"setting": "PriorityWeightAge", "live": "777", "expected": "1000"}]


@pytest.mark.parametrize("path, body", [
    ("/api/revisions/2/approve", {"operator": "alice smith"}),  # space: not a name
    ("/api/revisions/2/approve", {"operator": "x" * 65}),
    ("/api/revisions/2/approve", {"who": "alice"}),  # unknown field
    ("/api/revisions/2/reject", {"reason": "r" * 1001}),
    ("/api/revisions/2/reject", {"reason": 5}),
    ("/api/rollback", {"revision": 0}),
    ("/api/rollback", {"revision": "one"}),
    ("/api/revisions/two/approve", {}),
    ("/api/freeze", [1, 2]),
])
def test_invalid_input_is_422_and_changes_nothing(svc, path, body):
    c, _, store = svc
    before = snapshot(store)
    with pytest.raises(ServiceError) as e:
        c._call("POST", path, body)
    assert e.value.status == 422
    assert snapshot(store) == before


def test_the_token_is_checked_before_the_input(svc):
    _, anon, store = svc
    before = snapshot(store)
    for path, body in [("/api/rollback", {"revision": 0}), ("/api/revisions/two/approve", {}),
                       ("/api/freeze", [1, 2])]:
        with pytest.raises(Unauthorized):
            anon._call("POST", path, body)
    assert snapshot(store) == before


def test_page_escapes_what_operators_wrote(svc):
    c, _, store = svc
    c.freeze("<script>alert(1)</script> & more")
    c.reject(2, reason='"><img src=x onerror=alert(2)>')
    with urllib.request.urlopen(c.url + "/", timeout=30) as r:
        html = r.read().decode()
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in html


def test_invalid_query_is_422(svc):
    with pytest.raises(ServiceError, match="HTTP 422: query.limit") as e:
        svc[1].revisions(limit=0)
    assert e.value.status == 422


def test_outcomes_predicted_against_counterfactual(svc):
    c, anon, store = svc
    c.approve(2)
    # what the agent's judge records one period later (live/round.py's judge)
    store.record_outcome(2, JudgedOutcome("avg_jct", 0.08, "kept: ...", 0.05, 0.03,
                                          {"avg_jct": 3900.0}, {"avg_jct": 4000.0}, {"avg_jct": 3800.0},
                                          gain_sd=0.02, gain_min=0.01, gain_max=0.07, replays=5))
    rows = anon.outcomes()
    assert [(o["revision"], o["state"], o["predicted_gain"], o["spread"], o["counterfactual_gain"],
             o["twin_error"]) for o in rows] == [(1, "applied", None, None, None, None),
                                                 (2, "applied", 0.08, 0.02, 0.05, 0.03)]
    assert rows[1]["outcome"]["verdict"] == "kept: ..."
    assert rows[1]["outcome"]["simulated_old"] == {"avg_jct": 4000.0}
    assert (rows[1]["outcome"]["gain_sd"], rows[1]["outcome"]["replays"]) == (0.02, 5)
    # the status names the newest judged revision with the three figures, and the gain's spread
    # over the judge's replays
    assert anon.status()["judged"] == {"revision": 2, "predicted_gain": 0.08,
                                       "counterfactual_gain": 0.05, "twin_error": 0.03,
                                       "verdict": "kept: ...", "gain_sd": 0.02, "gain_min": 0.01,
                                       "gain_max": 0.07, "replays": 5}


def test_status_version_changes_with_the_store(svc):
    c, anon, store = svc
    v1 = anon.status()["version"]
    assert anon.status()["version"] == v1
    c.freeze()
    v2 = anon.status()["version"]
    store.record_round({"verdict": "hold"})
    v3 = anon.status()["version"]
    assert len({v1, v2, v3}) == 3


def test_reads_can_require_the_token(tmp_path):
    seed(tmp_path / "s")
    with serve_in_thread(make_app(tmp_path / "s", open_reads=False)) as url:
        with pytest.raises(Unauthorized):
            Client(url).status()
        with pytest.raises(Unauthorized):
            Client(url).revisions()
        assert Client(url, token=TOKEN).status()["running"]["id"] == 1


def test_foreign_host_header_is_refused(svc):
    # a page on another site that rebinds its DNS name to 127.0.0.1 sends its own Host header
    req = urllib.request.Request(svc[0].url + "/api/status", headers={"Host": "evil.example"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400


def test_status_without_an_agent_still_serves_the_store(tmp_path):
    from autosched.errors import LiveError
    from autosched.service.app import create_app

    seed(tmp_path / "s")

    def no_agent():
        raise LiveError("no agent settings in s (run agent init)")

    with serve_in_thread(create_app(tmp_path / "s", token=TOKEN, open_agent=no_agent)) as url:
        st = Client(url).status()
        assert st["running"]["id"] == 1 and st["pending"]["id"] == 2 and st["mode"] is None
        assert st["agent_error"] == "no agent settings in s (run agent init)"
        with pytest.raises(ServiceError, match="HTTP 503: no agent settings") as e:
            Client(url, token=TOKEN).approve(2)
        assert e.value.status == 503


def test_client_cannot_reach(tmp_path):
    with pytest.raises(ServiceError, match="cannot reach the service") as e:
        Client("http://127.0.0.1:9", timeout=5).status()
    assert e.value.status == 0


def test_token_generated_owner_only_and_reused(tmp_path):
    tok, path, new = load_or_create_token(tmp_path / "s")
    assert new and path == tmp_path / "s" / "service.token" and len(tok) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(tmp_path / "s") == (tok, path, False)


def test_token_file_checks(tmp_path):
    own = tmp_path / "tok"
    own.write_text("operator-chosen-token-123\n")
    os.chmod(own, 0o600)
    assert load_or_create_token(tmp_path / "s", own) == ("operator-chosen-token-123", own, False)
    assert not (tmp_path / "s" / "service.token").exists()
    os.chmod(own, 0o640)
    with pytest.raises(InputError, match=r"tok: the service token must be readable by its owner "
                                         r"only \(mode 0640; chmod 600 it\)"):
        load_or_create_token(tmp_path / "s", own)
    own.write_text("short\n")
    os.chmod(own, 0o600)
    with pytest.raises(InputError, match="at least 16 characters"):
        load_or_create_token(tmp_path / "s", own)
    with pytest.raises(InputError, match="missing: cannot read the service token"):
        load_or_create_token(tmp_path / "s", tmp_path / "missing")


def test_plot_positions_worked_by_hand():
    from autosched.live.records import RevisionState
    from autosched.service.page import plot_svg
    from autosched.service.views import OutcomeRow

    assert "No applied revision with a prediction yet" in plot_svg([])
    # one revision, predicted +10% (no spread), -10% in the counterfactual: the axis spans +-12%
    # (10% pad), so 0 sits half-way down the 188 px plot area that starts 28 px from the top
    svg = plot_svg([OutcomeRow(2, 1.0, RevisionState.APPLIED, 0.10, 0.0, -0.10, 0.02, None)])
    assert '<line x1="56" x2="628" y1="122.0" y2="122.0" class=zero />' in svg
    assert '<circle cx="336.0" cy="43.7" r="4" />' in svg  # 28 + 0.02/0.24 * 188
    assert 'y="196.3" width="8"' in svg  # counterfactual square centred on 28 + 0.22/0.24 * 188
    assert ">+12.0%</text>" in svg and ">0%</text>" in svg and ">-12.0%</text>" in svg


def test_the_cli_and_the_api_serialise_the_one_status_record(svc, tmp_path):
    """`agent status --json` and `GET /api/status` are `AgentStatus.to_dict()`: the same keys (the
    record's fields), the same values, and the API's model is made from the record's fields."""
    import dataclasses
    import json

    from typer.testing import CliRunner

    from autosched.cli import build_app
    from autosched.live.status import AgentStatus
    from autosched.service.models import StatusOut

    c, anon, store = svc
    c.approve(2, operator="alice")
    store.record_round({"trigger": "period", "action": "wait", "why": "w"})
    api = anon.status()
    r = CliRunner().invoke(build_app(), ["agent", "status", "--json", "--state", str(store.state_dir)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == api
    names = [f.name for f in dataclasses.fields(AgentStatus)]
    assert list(api) == names and list(StatusOut.model_fields) == names
    assert isinstance(api["last_round"], dict) and api["last_round"]["action"] == "wait"


def test_the_schema_types_evidence_outcome_and_states_from_the_store(svc):
    import dataclasses

    from autosched.live.records import RevisionState

    schemas = svc[1].openapi()["components"]["schemas"]
    rev = schemas["Revision"]["properties"]
    assert rev["evidence"] == {"$ref": "#/components/schemas/Evidence"}
    assert {"$ref": "#/components/schemas/JudgedOutcome"} in rev["outcome"]["anyOf"]
    assert set(schemas["Evidence"]["properties"]) == {f.name for f in dataclasses.fields(Evidence)}
    assert set(schemas["JudgedOutcome"]["properties"]) == {
        f.name for f in dataclasses.fields(JudgedOutcome)}
    assert schemas["RevisionState"]["enum"] == [s.value for s in RevisionState]
    assert set(schemas["AgentStatus"]["properties"]) >= {"running", "last_round", "version", "judged"}
    assert set(schemas["Judgement"]["properties"]) == {
        "revision", "predicted_gain", "counterfactual_gain", "twin_error", "verdict", "gain_sd",
        "gain_min", "gain_max", "replays"}


def test_preview_then_approve_records_who_and_the_diff(svc):
    """Who approved: the preview is the include file exactly as the apply writes it; the approve
    that sends its diff back is recorded with the name and the diff."""
    from autosched.live.fake import FakeConnector

    c, anon, store = svc
    include = FakeConnector(store.state_dir.parent / "fake").include
    p = anon._call("GET", "/api/revisions/2/preview")
    assert (p["revision"], p["path"], p["before"]) == (2, str(include), None)
    assert p["after"].splitlines()[0] == "# revision 2 (period)"
    assert "PriorityWeightAge=5000" in p["after"].splitlines()
    assert p["diff"].splitlines()[:3] == [f"--- {include} (now)", f"+++ {include} (revision 2)",
                                          f"@@ -0,0 +1,{len(p['after'].splitlines())} @@"]
    assert not include.exists()  # a preview writes nothing
    # a diff other than the one the file would get: refused, nothing applied
    with pytest.raises(Conflict, match="HTTP 409: the include file would now be written "
                                       "differently from the diff confirmed for revision 2"):
        c._call("POST", "/api/revisions/2/approve",
                {"operator": "alice", "include_diff": p["diff"].replace("5000", "5001")})
    assert store.pending().id == 2 and not include.exists()
    rev = c._call("POST", "/api/revisions/2/approve",
                  {"operator": "alice", "include_diff": p["diff"]})
    assert rev["approval"] == {"actor": "operator:alice", "include_diff": p["diff"],
                               "confirmed": True, "time": rev["approval"]["time"]}
    assert include.read_text() == p["after"]  # written exactly as previewed
    assert store.get(2).approval.include_diff == p["diff"]
    assert store.get(1).approval is None  # the baseline was never approved
    with pytest.raises(Conflict, match="revision 2 is applied; only a proposed revision can be "
                                       "approved"):
        anon._call("GET", "/api/revisions/2/preview")


def test_a_command_line_approve_records_the_diff_unconfirmed(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import build_app

    store = seed(tmp_path / "state")
    r = CliRunner().invoke(build_app(), ["agent", "approve", "2", "--state", str(tmp_path / "state"),
                                         "--actor", "operator:dave"])
    assert r.exit_code == 0, r.output
    ap = store.get(2).approval
    assert (ap.actor, ap.confirmed) == ("operator:dave", False)
    assert "+PriorityWeightAge=5000" in ap.include_diff.splitlines()
