"""``GET /metrics``: the exposition worked out by hand on a tiny store, and Debian's real
Prometheus server scraping the service and answering a query about it."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from autosched.client import Client
from autosched.live.agent import open_agent
from autosched.live.records import JudgedOutcome
from autosched.service.metrics import CONTENT_TYPE, escape_label, number, render
from service_kit import TOKEN, make_app, seed, serve_in_thread, serve_process


def samples(text: str) -> dict[str, float]:
    """The sample lines of an exposition: 'name{labels}' -> value."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_the_exposition_of_a_tiny_store_worked_by_hand(tmp_path):
    store = seed(tmp_path / "state")  # revision 1 running, 2 proposed (+8% +- 2%)
    store.record_round({"trigger": "period", "action": "wait", "why": "w"}, when=1000.0)
    store.record_round({"trigger": "period", "action": "proposed", "why": "p"}, when=2000.0)
    agent = open_agent(tmp_path / "state")
    text = render(agent.status(), store.round_counts())
    got = samples(text)
    applied = store.get(1).applied_at
    assert got == {
        'autosched_info{policy="multifactor",mode="propose",connector="fake"}': 1,
        "autosched_running_revision": 1,
        "autosched_running_applied_timestamp_seconds": pytest.approx(applied),
        'autosched_running_knob_value{knob="PriorityCalcPeriod"}': 5,
        'autosched_running_knob_value{knob="PriorityDecayHalfLife"}': 604800,
        'autosched_running_knob_value{knob="PriorityFavorSmall"}': 0,  # a flag: 0 or 1
        'autosched_running_knob_value{knob="PriorityMaxAge"}': 604800,
        'autosched_running_knob_value{knob="PriorityWeightAge"}': 1000,
        'autosched_running_knob_value{knob="PriorityWeightFairshare"}': 10000,
        'autosched_running_knob_value{knob="PriorityWeightJobSize"}': 1000,
        'autosched_running_knob_value{knob="PriorityWeightTRES.CPU"}': 0,
        'autosched_running_knob_value{knob="PriorityWeightTRES.GRES/gpu"}': 0,
        'autosched_running_knob_value{knob="bf_continue"}': 0,
        'autosched_running_knob_value{knob="bf_interval"}': 30,
        'autosched_running_knob_value{knob="bf_max_job_test"}': 500,
        'autosched_running_knob_value{knob="bf_resolution"}': 60,
        'autosched_running_knob_value{knob="bf_window"}': 1440,
        "autosched_pending_revision": 2,
        "autosched_pending_predicted_gain": 0.08,
        "autosched_pending_predicted_gain_spread": 0.02,
        "autosched_revisions": 2,
        **{f'autosched_rounds_total{{action="{a}"}}': 0 for a in (
            "applied", "apply failed", "blocked", "frozen", "none", "rollback failed",
            "rolled back", "tuning failed")},
        'autosched_rounds_total{action="wait"}': 1,
        'autosched_rounds_total{action="proposed"}': 1,
        "autosched_frozen": 0, "autosched_blocked": 0, "autosched_interrupted_apply": 0,
        "autosched_last_round_timestamp_seconds": 2000,
        "autosched_next_round_timestamp_seconds": 2000 + 3600,  # a period on
        # the baseline's round read Slurm (no loop ever ran: no loop gauge, no heartbeat)
        "autosched_slurm_read_timestamp_seconds": pytest.approx(store.last_reading().time),
    }
    # every family once, its HELP and TYPE right before its samples
    assert text.count("# TYPE autosched_rounds_total counter\n") == 1
    assert "# TYPE autosched_pending_revision gauge\nautosched_pending_revision 2\n" in text
    assert "autosched_twin_error" not in text  # absent until a judge records one
    assert "autosched_counterfactual_gain" not in text
    assert text.endswith("\n")


def test_unknown_values_are_absent_and_the_twin_error_appears_once_recorded(tmp_path):
    store = seed(tmp_path / "state")
    agent = open_agent(tmp_path / "state")
    agent.approve(2, "operator:alice")
    store.freeze("operator:bob", "drill")
    store.set_blocked("hand edit: PriorityWeightAge is 7 live")
    got = samples(render(agent.status(), store.round_counts()))
    for name in ("autosched_pending_revision", "autosched_pending_predicted_gain",
                 "autosched_last_round_timestamp_seconds", "autosched_next_round_timestamp_seconds"):
        assert name not in got
    assert (got["autosched_running_revision"], got["autosched_frozen"], got["autosched_blocked"]
            ) == (2, 1, 1)
    store.record_outcome(2, JudgedOutcome("avg_jct", 0.08, "not judged: x"))
    assert not any(k.startswith(("autosched_twin_error", "autosched_counterfactual_gain"))
                   for k in samples(render(agent.status(), {})))  # judged, no figures
    store.record_outcome(2, JudgedOutcome("avg_jct", 0.08, "kept", -0.012, twin_error=0.031))
    got = samples(render(agent.status(), {}))
    assert got['autosched_twin_error{revision="2"}'] == 0.031
    assert got['autosched_counterfactual_gain{revision="2"}'] == -0.012


def test_the_loop_the_last_round_and_the_predictions_miss_are_metrics(tmp_path):
    """No gauge gave the loop's liveness, the heartbeat's or the last Slurm read's age, a
    round's duration or the prediction error, and no label said which agent a series is of."""
    from autosched.live.records import Evidence

    store = seed(tmp_path / "state")
    store.beat(30.0, 1.0)  # this process: alive
    store.record_round({"trigger": "period", "action": "none", "why": "x", "seconds": 12.5},
                       when=3000.0)
    agent = open_agent(tmp_path / "state")
    agent.reject(2, "operator:x")
    p = store.create(dict(store.get(1).config, PriorityWeightAge=7), trigger="period",
                     actor="agent:propose",
                     evidence=Evidence(predicted_gain=0.2, history_jobs=67, imputed_durations=42))
    got = samples(render(agent.status(), store.round_counts(), "/var/lib/autosched"))
    sd = 'state_dir="/var/lib/autosched"'
    assert got[f"autosched_loop_alive{{{sd}}}"] == 1
    assert got[f"autosched_heartbeat_timestamp_seconds{{{sd}}}"] == pytest.approx(
        store.heartbeat().time)
    assert got[f"autosched_last_round_duration_seconds{{{sd}}}"] == 12.5
    assert got[f"autosched_pending_imputed_share{{{sd}}}"] == pytest.approx(42 / 67)
    assert got[f'autosched_running_knob_value{{{sd},knob="PriorityWeightAge"}}'] == 1000
    agent.approve(p.id, "operator:x")
    store.record_outcome(p.id, JudgedOutcome("avg_jct", 0.2, "kept", 0.05, twin_error=0.01))
    got = samples(render(agent.status(), {}, "/s"))
    # predicted +20%, measured +5%: it overshot by 15 points (worked by hand)
    assert got[f'autosched_prediction_error{{state_dir="/s",revision="{p.id}"}}'] == \
        pytest.approx(0.15)


def test_label_values_and_numbers_as_the_text_format_writes_them():
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert [number(v) for v in (3, 3.0, 0.08, -2.5, 1e20, float("inf"), float("nan"))] == [
        "3", "3", "0.08", "-2.5", "1e+20", "+Inf", "NaN"]


def test_the_service_serves_metrics_and_needs_the_token_off_localhost(tmp_path):
    seed(tmp_path / "state")
    with serve_in_thread(make_app(tmp_path / "state")) as url:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            assert r.headers["Content-Type"] == CONTENT_TYPE
            sd = f'state_dir="{tmp_path / "state"}"'
            assert samples(r.read().decode())[f"autosched_pending_revision{{{sd}}}"] == 2
    with serve_in_thread(make_app(tmp_path / "state", open_reads=False)) as url:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/metrics", timeout=30)
        assert e.value.code == 401
        req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert samples(r.read().decode())[f"autosched_revisions{{{sd}}}"] == 2


# -- the real Prometheus --------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _query(prom: str, expr: str, want: float | None = None, timeout: float = 90) -> list[dict]:
    """Prometheus' answer to instant query `expr`, once it has a sample (equal to `want`)."""
    deadline = time.monotonic() + timeout
    result: list[dict] = []
    while time.monotonic() < deadline:
        result = _get_json(f"{prom}/api/v1/query?query={urllib.parse.quote(expr)}")["data"]["result"]
        if result and (want is None or float(result[0]["value"][1]) == want):
            return result
        time.sleep(0.5)
    raise AssertionError(f"Prometheus has no {expr} = {want} after {timeout} s: {result}")


@pytest.mark.prometheus
def test_prometheus_scrapes_the_service_and_answers_a_query(prometheus_bin: Path, tmp_path):
    state = tmp_path / "state"
    seed(state)
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "token").chmod(0o600)
    with serve_process(state, "--token-file", str(tmp_path / "token")) as (url, _):
        target = url.removeprefix("http://")
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n  - job_name: autosched\n"
                          "    metrics_path: /metrics\n"
                          f"    static_configs:\n      - targets: ['{target}']\n")
        port = _free_port()
        prom = f"http://127.0.0.1:{port}"
        log = (tmp_path / "prometheus.log").open("w")
        proc = subprocess.Popen([str(prometheus_bin), f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
                try:
                    with urllib.request.urlopen(prom + "/-/ready", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "prometheus did not become ready"
                time.sleep(0.3)
            up = _query(prom, 'up{job="autosched"}', want=1)
            assert up[0]["metric"]["instance"] == target
            gain = _query(prom, "autosched_pending_predicted_gain", want=0.08)
            assert gain[0]["metric"]["job"] == "autosched"
            knob = _query(prom, 'autosched_running_knob_value{knob="PriorityWeightAge"}', want=1000)
            assert len(knob) == 1
            # the series follows the agent: approve revision 2, Prometheus sees it run
            Client(url, token=TOKEN).approve(2, operator="alice")
            _query(prom, "autosched_running_revision", want=2)
            _query(prom, 'autosched_running_knob_value{knob="PriorityWeightAge"}', want=5000)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            log.close()
