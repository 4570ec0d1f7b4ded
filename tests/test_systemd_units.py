"""The systemd units in contrib/systemd: their command lines are run as the units give them
(ExecStart parsed from the files, with the units' Environment=; only the state directory and the
port are set as an operator's drop-in would), not under systemd."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from autosched.service.serve import GRACE_S
from service_kit import AUTOSCHED, SRC, seed

UNITS = Path(__file__).resolve().parents[1] / "contrib" / "systemd"


def unit(name: str) -> dict[str, list[str]]:
    """The [Service] section of unit `name`: key -> every value it is given, in order."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{name}: not a key=value line: {line}"
        if section == "Service":
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def environment(service: dict[str, list[str]]) -> dict[str, str]:
    env = {}
    for item in service.get("Environment", []):
        for word in shlex.split(item):
            k, _, v = word.partition("=")
            env[k] = v
    return env


def command(service: dict[str, list[str]]) -> list[str]:
    """ExecStart as argv, with this checkout's autosched in place of the installed path."""
    (line,) = service["ExecStart"]
    argv = shlex.split(line)
    assert os.path.isabs(argv[0]) and Path(argv[0]).name == "autosched", argv
    return [AUTOSCHED, *argv[1:]]


def test_the_units_say_what_they_run_and_where_they_may_write():
    agent, serve = unit("autosched-agent.service"), unit("autosched-serve.service")
    assert command(agent)[1:] == ["agent", "run"] and command(serve)[1:] == ["agent", "serve"]
    for svc in (agent, serve):
        env = environment(svc)
        assert env["AUTOSCHED_STATE"] == "/var/lib/" + svc["StateDirectory"][0]
        # the include file (beside slurm.conf by default) is replaced by a rename: its
        # directory must be writable under ProtectSystem=strict
        assert svc["ProtectSystem"] == ["strict"]
        # ... and that directory only: slurm.conf's own stays read-only, also to the service
        # that answers HTTP (it was ReadWritePaths=/etc/slurm)
        assert svc["ReadWritePaths"] == [str(Path(env["SLURM_CONF"]).parent / "autosched.d")]
        assert svc["User"] == svc["Group"] == ["slurm"]
        assert svc["CapabilityBoundingSet"] == [""] and svc["PrivateDevices"] == ["yes"]
        assert svc["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
        assert svc["UMask"] == ["0077"] and svc["MemoryMax"]
        # longer than the longest apply: about 3 minutes of Slurm timeouts against a hung
        # slurmctld (30 s per command, reads retried); the service waits for it, within that
        assert int(svc["TimeoutStopSec"][0]) > GRACE_S >= 180
    assert environment(serve)["AUTOSCHED_HOST"] == "127.0.0.1"  # localhost only


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("name", ["autosched-agent.service", "autosched-serve.service"])
def test_systemd_rates_the_units_ok(name):
    """`systemd-analyze security` rated both 8.5 EXPOSED; docs/slurm.md gives the score."""
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", str(UNITS / name)],
                       capture_output=True, text=True, timeout=60)
    line = next(ln for ln in r.stdout.splitlines() if "Overall exposure level" in ln)
    score = float(line.split(":")[1].split()[0])
    assert score <= 1.3, line


def _env(service: dict[str, list[str]], **override: str) -> dict[str, str]:
    return {**os.environ, **environment(service), "PYTHONPATH": SRC, **override}


def test_the_agent_unit_runs_rounds_logs_json_and_stops_at_sigterm(tmp_path):
    state = tmp_path / "state"
    seed(state)  # a fake cluster, revision 2 proposed: a round waits for its approval
    svc = unit("autosched-agent.service")
    proc = subprocess.Popen(command(svc), env=_env(svc, AUTOSCHED_STATE=str(state)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # one JSON line per round
        assert (first["event"], first["action"]) == ("round", "wait"), first
        assert first["why"] == "revision 2 is proposed and awaits approval"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # between rounds: it stops at once, not after a poll
        assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() - start < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_the_serve_unit_serves_the_state_and_stops_at_sigterm(tmp_path):
    state = tmp_path / "state"
    seed(state)
    svc = unit("autosched-serve.service")
    proc = subprocess.Popen(command(svc),
                            env=_env(svc, AUTOSCHED_STATE=str(state), AUTOSCHED_PORT="0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline(), proc.stderr.readline()]
        assert lines[0] == f"token: generated into {state / 'service.token'}\n", lines
        assert lines[1].startswith(f"serving {state} on http://127.0.0.1:"), lines
        url = lines[1].split(" on ", 1)[1].split("/ ")[0]
        with urllib.request.urlopen(url + "/api/status", timeout=30) as r:
            assert json.loads(r.read())["pending"]["id"] == 2
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            assert f'\nautosched_pending_revision{{state_dir="{state}"}} 2\n'.encode() in r.read()
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then ends by the signal it got: systemd counts a SIGTERM end as clean
        assert proc.wait(20) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("name", ["autosched-agent.service", "autosched-serve.service"])
def test_the_units_are_documented(name):
    docs = Path(__file__).resolve().parents[1] / "docs"
    assert f"contrib/systemd/{name}" in (docs / "slurm.md").read_text() + (
        docs / "service.md").read_text()
