"""What the agent tells the outside world: the webhook (`--notify URL`) against a real local
receiver, and the JSON log lines of `agent run` and of the service."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autosched.cli import build_app
from autosched.live.activity import Activity, ActivityKind
from autosched.live.errors import LiveError
from autosched.live.events_log import JsonLog, log_line
from autosched.live.notify import Webhook, check_url, notice, payload
from autosched.live.records import Evidence, Revision, RevisionKind, RevisionState
from autosched.live.round import Action
from live_helpers import leave_an_apply_open, make
from service_kit import AUTOSCHED, SRC, TOKEN, seed


class Receiver:
    """A local HTTP server that keeps every JSON body POSTed to it; `delay` s before answering,
    with `status`."""

    def __init__(self, delay: float = 0.0, status: int = 200) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.delay, self.status = delay, status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                outer.bodies.append(json.loads(self.rfile.read(n)))
                time.sleep(outer.delay)
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/s3cr3t-path"

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        t = threading.Thread(target=self.server.serve_forever, daemon=True)
        t.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


def _rev(state: RevisionState = RevisionState.PROPOSED) -> Revision:
    from autosched.live.records import Event

    return Revision(id=7, created=1.0, kind=RevisionKind.PROPOSAL, config={"PriorityWeightAge": 5},
                    diff={"PriorityWeightAge": (1, 5)}, parent=6, trigger="period",
                    evidence=Evidence(predicted_gain=0.08, spread=0.02),
                    events=(Event(1.0, state, "agent:propose", ""),))


def test_which_activity_is_which_notice():
    round_ = lambda action, why="", before="": Activity(  # noqa: E731
        ActivityKind.ROUND, "agent", why, action=action, blocked_before=before)
    assert notice(round_("proposed")) == "proposal"
    assert notice(round_("applied")) == "apply"  # auto mode
    assert notice(round_("blocked", "Slurm does not answer")) == "block"
    assert notice(round_("blocked", "hand edit: X", before="hand edit: X")) is None  # goes on
    assert notice(round_("blocked", "hand edit: Y", before="hand edit: X")) == "block"  # new why
    for action in ("rolled back", "wait", "none", "frozen", "apply failed"):
        assert notice(round_(action)) is None  # a rollback is told by the rollback itself
    # a round that could not tune: told when its reason is new, as a block
    assert notice(round_("tuning failed", "tuning failed: x")) == "tuning_failed"
    assert notice(round_("tuning failed", "tuning failed: x", before="tuning failed: x")) is None
    assert [notice(Activity(k, "operator:a")) for k in ActivityKind if k is not ActivityKind.ROUND
            ] == ["apply", "reject", "rollback", "freeze", "unfreeze", "adopt", "apply_failed",
                  "restore", "include"]


def test_the_notice_body_worked_by_hand():
    act = Activity(ActivityKind.ROUND, "agent", "gain +8%", _rev(), action="proposed", time=5.0)
    assert payload("proposal", act, "/var/lib/autosched") == {
        "event": "proposal", "time": 5.0, "actor": "agent", "why": "gain +8%",
        "state_dir": "/var/lib/autosched",
        "revision": {"id": 7, "state": "proposed", "trigger": "period",
                     "diff": {"PriorityWeightAge": [1, 5]}, "predicted_gain": 0.08,
                     "spread": 0.02}}
    assert payload("freeze", Activity(ActivityKind.FREEZE, "operator:bob", "drill", time=6.0),
                   "s")["revision"] is None


@pytest.mark.parametrize("url", ["", "ftp://host/x", "http://", "localhost:80/x", "file:///etc"])
def test_a_notify_url_must_be_http_with_a_host(url):
    with pytest.raises(LiveError, match="notify URL"):
        check_url(url)


def test_the_webhook_tells_proposal_apply_rollback_freeze_and_a_new_block(tmp_path):
    with Receiver().running() as rx:
        agent, fake = make(tmp_path, notify=rx.url)
        out = agent.step()
        assert out.action is Action.PROPOSED
        agent.approve(out.revision, "operator:alice")
        agent.rollback(None, "operator:bob")
        agent.freeze("operator:carol", "drill")
        agent.unfreeze("operator:carol")
        fake.hand_edit("PriorityWeightAge", "777")
        assert agent.step().action is Action.BLOCKED
        assert agent.step().action is Action.BLOCKED  # the same block: told once
        assert agent.sinks[0].flush()  # type: ignore[attr-defined]
        assert [b["event"] for b in rx.bodies] == ["proposal", "apply", "rollback", "freeze",
                                                   "unfreeze", "block"]
        prop, apply, back, freeze, _, block = rx.bodies
        assert prop["revision"]["id"] == 2 and prop["revision"]["state"] == "proposed"
        assert prop["revision"]["predicted_gain"] == agent.store.get(2).evidence.predicted_gain
        assert (apply["actor"], apply["revision"]["id"], apply["revision"]["state"]) == (
            "operator:alice", 2, "applied")
        assert (back["actor"], back["revision"]["id"], back["why"]) == (
            "operator:bob", 3, "rollback to revision 1 by operator:bob")
        assert (freeze["actor"], freeze["why"], freeze["revision"]) == ("operator:carol", "drill",
                                                                        None)
        assert block["why"].startswith("hand edit: PriorityWeightAge is 777 live")
        assert {b["state_dir"] for b in rx.bodies} == {str(tmp_path / "state")}


def test_the_webhook_never_holds_a_round_up_nor_fails_it(tmp_path):
    said: list[str] = []
    with Receiver(delay=30).running() as slow:
        agent, _ = make(tmp_path, notify=slow.url)
        agent.log = said.append
        assert isinstance(agent.sinks[0], Webhook)
        agent.sinks[0].timeout = 0.5  # type: ignore[attr-defined]
        start = time.monotonic()
        agent.freeze("operator:carol", "drill")
        # the notice is queued: the freeze does not wait for the receiver at all
        assert time.monotonic() - start < 0.4 and agent.store.flags().frozen
        assert agent.sinks[0].flush(10)  # type: ignore[attr-defined]
        assert said == [f"webhook http://127.0.0.1:{slow.server.server_address[1]}/...: freeze "
                        "notice not answered within 0.5 s; going on without it"]  # no secret path
    said.clear()
    with Receiver(status=500).running() as failing:
        agent.sinks[0] = Webhook(failing.url, str(agent.state_dir), said.append)
        agent.unfreeze("operator:carol")
        agent.freeze("operator:carol", "again")
        assert agent.sinks[0].flush()  # type: ignore[attr-defined]
        assert len(failing.bodies) == 2 and agent.store.flags().frozen
        assert said[0].endswith(": unfreeze notice not delivered: HTTP 500 (after " +
                                said[0].rsplit("(after ", 1)[1])
    said.clear()
    agent.sinks[0] = Webhook("http://127.0.0.1:9/x", str(agent.state_dir), said.append,
                             timeout=2)
    agent.unfreeze("operator:carol")
    agent.freeze("operator:carol", "receiver down")
    assert agent.sinks[0].flush()  # type: ignore[attr-defined]
    assert agent.store.flags().frozen and "freeze notice not delivered" in said[1]


def test_a_failing_sink_is_logged_and_the_action_stands(tmp_path):
    agent, _ = make(tmp_path)
    said: list[str] = []
    agent.log = said.append

    def broken(activity: Activity) -> None:
        raise RuntimeError("disk full")

    agent.sinks.append(broken)
    agent.freeze("operator:x", "y")
    assert agent.store.flags().frozen and said == ["function failed on freeze: disk full"]


def test_init_saves_the_notify_url_and_refuses_a_bad_one(tmp_path):
    from autosched.live.fake import FakeConnector

    FakeConnector.create(tmp_path / "fake")
    base = ["agent", "init", "--state", str(tmp_path / "s"), "--fake", str(tmp_path / "fake")]
    r = CliRunner().invoke(build_app(), [*base, "--notify", "ftp://example.org/x"])
    assert r.exit_code == 2 and r.output == ("error: notify URL 'ftp://example.org/x': give an "
                                             "http:// or https:// URL with a host\n")
    r = CliRunner().invoke(build_app(), [*base, "--notify", "https://hooks.example.org/T1"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "s" / "settings.json").read_text())["notify"] == \
        "https://hooks.example.org/T1"


# -- JSON log lines -----------------------------------------------------------------------

def test_a_log_line_worked_by_hand():
    line = log_line({"event": "freeze", "actor": "operator:bob", "why": 'a "b"\nc'}, when=0.0)
    assert line == ('{"time": "1970-01-01T00:00:00Z", "event": "freeze", "actor": "operator:bob", '
                    f'"why": "a \\"b\\"\\nc", "pid": {os.getpid()}}}')
    assert "\n" not in line
    act = Activity(ActivityKind.ROUND, "agent", "too little history", _rev(), action="blocked",
                   trigger="period")
    assert act.to_record() == {"event": "round", "actor": "agent", "action": "blocked",
                               "trigger": "period", "why": "too little history", "revision": 7,
                               "state": "proposed"}


def test_agent_run_logs_one_json_line_per_round(tmp_path):
    store = seed(tmp_path / "state")
    store.freeze("operator:carol", "drill")
    r = CliRunner().invoke(build_app(), ["agent", "run", "--rounds", "1", "--state",
                                         str(tmp_path / "state")])
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(d["event"], d["action"], d["why"]) for d in lines] == [
        ("round", "frozen", "frozen by operator:carol: drill")]
    assert set(lines[0]) == {"time", "event", "actor", "action", "trigger", "why", "seconds",
                             "pid"}
    assert 0 <= lines[0]["seconds"] < 60  # the round's duration


def test_the_service_logs_every_action_and_refusal_as_json(tmp_path):
    state = tmp_path / "state"
    seed(state)
    (tmp_path / "token").write_text(TOKEN)
    os.chmod(tmp_path / "token", 0o600)
    err = tmp_path / "serve.err"
    with err.open("w") as f:
        proc = subprocess.Popen([AUTOSCHED, "agent", "serve", "--state", str(state), "--port", "0",
                                 "--token-file", str(tmp_path / "token")],
                                env={**os.environ, "PYTHONPATH": SRC}, stderr=f,
                                stdout=subprocess.DEVNULL)
    try:
        url = _served_url(err, proc)
        from autosched.client import Client, Unauthorized

        with pytest.raises(Unauthorized):
            Client(url).freeze("no token")
        Client(url, token=TOKEN).freeze("drill", operator="bob")
        Client(url).status()  # a read: not logged
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    records = [json.loads(line) for line in err.read_text().splitlines() if line.startswith("{")]
    assert [(r["event"], r.get("status"), r.get("actor")) for r in records] == [
        ("request", 401, None), ("freeze", None, "operator:bob"), ("request", 200, None)]
    assert records[0]["path"] == records[2]["path"] == "/api/freeze"
    assert records[1]["why"] == "drill"


def _served_url(err: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in err.read_text().splitlines():
            if line.startswith("serving "):
                return line.split(" on ", 1)[1].split("/ ")[0]
        assert proc.poll() is None, err.read_text()
        time.sleep(0.1)
    raise AssertionError("the service did not start: " + err.read_text())


def test_json_log_survives_a_closed_stream(tmp_path):
    f = (tmp_path / "x").open("w")
    f.close()
    JsonLog(f).write({"event": "message", "message": "lost"})  # no exception


def test_a_post_that_times_out_just_before_the_wait_is_told_as_unanswered(tmp_path):
    # the POST's socket timeout and the wait are the same length; under load the POST may give up
    # first. Forced here: the POST gives up after 0.2 s, the wait would last 5 s.
    said: list[str] = []
    with Receiver(delay=30).running() as slow:
        hook = Webhook(slow.url, str(tmp_path), said.append, timeout=5.0)
        post = hook._post

        def impatient(data: bytes, failure: list[str]) -> None:
            hook.timeout = 0.2
            try:
                post(data, failure)
            finally:
                hook.timeout = 5.0

        hook._post = impatient  # type: ignore[method-assign]
        agent, _ = make(tmp_path, notify=slow.url)
        agent.sinks[0] = hook
        agent.freeze("operator:carol", "drill")
        hook.flush()
    assert said == [f"webhook http://127.0.0.1:{slow.server.server_address[1]}/...: freeze "
                    "notice not answered within 5 s; going on without it"]


@pytest.mark.parametrize("url, why", [
    ("http://[::1/x", "Invalid IPv6 URL"),
    ("http://127.0.0.1:36112/sec ret", "holds whitespace or a control character"),
    ("http://127.0.0.1:36112/a\r\nX-Injected: 1", "holds whitespace or a control character"),
    ("http://127.0.0.1:abc/x", "Port could not be cast to integer value"),
    ("http://127.0.0.1:99999/x", "Port out of range"),
])
def test_a_url_no_notice_could_be_sent_to_is_refused_at_init(tmp_path, url, why):
    """Each was accepted (or a traceback), and every notice then died in its thread."""
    from autosched.live.fake import FakeConnector

    FakeConnector.create(tmp_path / "fake")
    r = CliRunner().invoke(build_app(), ["agent", "init", "--state", str(tmp_path / "s"), "--fake",
                                         str(tmp_path / "fake"), "--notify", url])
    assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit)
    assert r.output.startswith(f"error: notify URL {url!r}: ") and why in r.output, r.output
    assert len(r.output.splitlines()) == 1 and not (tmp_path / "s" / "settings.json").exists()


class Redirector(Receiver):
    """Answers every POST with a 302 to `target`; counts the requests it got."""

    def __init__(self, target: str) -> None:
        super().__init__()
        outer = self
        self.hits = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.hits += 1
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server.RequestHandlerClass = Handler


class Everything(Receiver):
    """Keeps the method of every request (a redirect followed would arrive here as a GET)."""

    def __init__(self) -> None:
        super().__init__()
        outer = self
        self.methods: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.methods.append("GET")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.server.RequestHandlerClass = Handler


def test_a_redirect_is_not_followed_and_is_reported(tmp_path):
    """urllib followed a 302 to another host as a GET without the body, and the notice counted
    as delivered."""
    said: list[str] = []
    with Everything().running() as other, Redirector(other.url).running() as hop:
        hook = Webhook(hop.url, str(tmp_path), said.append)
        hook(Activity(ActivityKind.FREEZE, "operator:bob", "drill"))
        assert hook.flush()
        assert hop.hits == 1 and other.methods == []
    assert len(said) == 1 and said[0].startswith(
        f"webhook http://127.0.0.1:{hop.server.server_address[1]}/...: freeze notice not "
        "delivered: HTTP 302 (a redirect: notices are not sent on to another URL)")


def test_the_cli_says_a_notice_it_could_not_deliver(tmp_path):
    """Commands opened the agent with a log that dropped every message: `agent freeze` printed
    only "agent frozen" whatever the receiver did."""
    state = tmp_path / "state"
    seed(state)
    with Receiver(status=500).running() as failing:
        data = json.loads((state / "settings.json").read_text())
        data["notify"] = failing.url
        (state / "settings.json").write_text(json.dumps(data))
        r = subprocess.run([AUTOSCHED, "agent", "freeze", "--state", str(state), "--reason", "x"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC},
                           timeout=60)
        assert r.returncode == 0 and r.stdout == "agent frozen\n"
        port = failing.server.server_address[1]
        assert r.stderr.startswith(f"warning: webhook http://127.0.0.1:{port}/...: freeze notice "
                                   "not delivered: HTTP 500 (after ")
        assert "s3cr3t" not in r.stderr
        r = subprocess.run([AUTOSCHED, "agent", "reject", "2", "--state", str(state)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC},
                           timeout=60)
        assert r.returncode == 0 and "reject notice not delivered: HTTP 500" in r.stderr
        assert [b["event"] for b in failing.bodies] == ["freeze", "reject"]


def test_a_hanging_receiver_never_holds_up_the_apis_freeze(tmp_path):
    """The API's freeze took 5.0 s against a receiver that slept 30 s."""
    from service_kit import AUTH, call, make_app, serve_in_thread

    state = tmp_path / "state"
    store = seed(state)
    with Receiver(delay=30).running() as slow:
        data = json.loads((state / "settings.json").read_text())
        data["notify"] = slow.url
        (state / "settings.json").write_text(json.dumps(data))
        with serve_in_thread(make_app(state)) as url:
            start = time.monotonic()
            status, _ = call(url, "POST", "/api/freeze", b'{"reason": "now"}', AUTH)
            took = time.monotonic() - start
        assert status == 200 and store.flags().frozen and took < 1.0, took
        deadline = time.monotonic() + 10
        while not slow.bodies and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [b["event"] for b in slow.bodies] == ["freeze"]  # sent all the same


def test_a_restore_and_an_applied_round_are_told_with_what_they_changed(tmp_path):
    """A reconcile that reconfigured Slurm back left no log line and sent no notice; an applied
    round's log line had no diff, and no line gave a round's duration."""

    lines: list[dict[str, Any]] = []
    with Receiver().running() as rx:
        agent, fake = make(tmp_path, notify=rx.url, mode="auto")
        said: list[str] = []
        agent.log = said.append
        agent.sinks.append(lambda a: lines.append(a.to_record()))
        p = agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=5),
                               trigger="manual", actor="t")
        leave_an_apply_open(agent, p.id)
        out = agent.step()  # reconciles first, then tunes and applies (auto mode)
        assert out.action is Action.APPLIED, out
        assert agent.sinks[0].flush()  # type: ignore[attr-defined]
        events = [b["event"] for b in rx.bodies]
        assert events == ["restore", "apply"], events
        restore = rx.bodies[0]
        assert restore["actor"] == "agent:reconcile" and restore["revision"]["id"] == p.id
        assert restore["revision"]["state"] == "failed"
        assert restore["why"].startswith("interrupted: the process applying it (pid ")
        assert f"the previous settings were restored (by pid {os.getpid()})" in restore["why"]
    assert said[0].startswith(f"revision {p.id}: interrupted: the process applying it")
    applied = [r for r in lines if r["event"] == "round"][-1]
    assert applied["action"] == "applied" and applied["diff"] == {
        k: list(v) for k, v in agent.store.get(out.revision).diff.items()} != {}
    assert 0 < applied["seconds"] < 120


def test_an_apply_that_did_not_take_is_told_with_what_it_tried(tmp_path):
    """A failed apply reconfigured Slurm twice (the revision, then back) and told no one."""
    from autosched.live.errors import ApplyFailed

    with Receiver().running() as rx:
        agent, fake = make(tmp_path, notify=rx.url)
        lines: list[dict[str, Any]] = []
        agent.sinks.append(lambda a: lines.append(a.to_record()))
        base = agent.view.running_or_baseline()
        p = agent.store.create(dict(base.config, PriorityWeightAge=5), trigger="manual",
                               actor="t")
        fake.update(fail_reconfigure=True)
        with pytest.raises(ApplyFailed):
            agent.approve(p.id, "operator:alice")
        assert agent.sinks[0].flush()  # type: ignore[attr-defined]
    assert [b["event"] for b in rx.bodies] == ["apply_failed"]
    failed = rx.bodies[0]
    assert (failed["actor"], failed["revision"]["id"], failed["revision"]["state"]) == (
        "operator:alice", p.id, "failed")
    assert failed["why"].startswith("apply failed: ")
    (line,) = [r for r in lines if r["event"] == "apply_failed"]
    assert line["diff"] == {"PriorityWeightAge": [1000, 5]}
