"""Shared by the service's tests: an agent on the fake connector with a proposal, the service
on a real socket (in a thread, or `autosched agent serve` in its own process), headless Chromium."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ContextManager, Iterator

from autosched.live.records import Evidence, RevisionState
from autosched.live.store import RevisionStore
from autosched.service.serve import serve_in_process

SRC = str(Path(__file__).resolve().parents[1] / "src")
AUTOSCHED = str(Path(sys.executable).with_name("autosched"))
TOKEN = "test-token-0123456789abcdef"
P, A, R, RB = (RevisionState.PROPOSED, RevisionState.APPLIED, RevisionState.REJECTED,
               RevisionState.ROLLED_BACK)
# the fake cluster's settings as the agent's config (simulator units: seconds, bools)
BASE = {"PriorityCalcPeriod": 5, "PriorityDecayHalfLife": 604800.0, "PriorityFavorSmall": False,
        "PriorityMaxAge": 604800.0, "PriorityWeightAge": 1000, "PriorityWeightFairshare": 10000,
        "PriorityWeightJobSize": 1000,
        # not listed by the fake cluster: Slurm's defaults (TRES weights 0, bf_* defaults)
        "PriorityWeightTRES.CPU": 0, "PriorityWeightTRES.GRES/gpu": 0, "bf_continue": False,
        "bf_interval": 30, "bf_max_job_test": 500, "bf_resolution": 60, "bf_window": 1440}


def seed(state: Path, fake: Path | None = None) -> RevisionStore:
    """An agent on a fake cluster (`agent init` with the fake connector): revision 1 the config
    found live (baseline), revision 2 a proposal PriorityWeightAge 1000 -> 5000 with evidence,
    made as the agent's round makes it (`store.create` with the round's evidence)."""
    from autosched.live.agent import AgentSettings, init_agent
    from autosched.live.fake import FakeConnector

    fake = fake or state.parent / "fake"
    FakeConnector.create(fake)
    agent = init_agent(state, AgentSettings(connector={"kind": "fake", "directory": str(fake)},
                                            period=3600.0))
    base = agent.view.running_or_baseline()
    assert base.id == 1 and base.config == BASE, base
    agent.store.create({**BASE, "PriorityWeightAge": 5000}, trigger="period",
                       actor="agent:propose", parent=1,
                       evidence=Evidence(predicted_gain=0.08, spread=0.02, samples=8,
                                         metric="avg_jct"))
    return agent.store


def rollback_in_background(client: Any) -> tuple[threading.Thread, list[object]]:
    """Start ``client.rollback()`` in a thread; its answer, or the ServiceError it raised, is
    appended to the returned list when it ends (so a test can freeze while it is in flight)."""
    from autosched.client import ServiceError

    done: list[object] = []

    def rollback() -> None:
        try:
            done.append(client.rollback())
        except ServiceError as e:
            done.append(e)

    t = threading.Thread(target=rollback)
    t.start()
    return t, done


def live_values(state: Path) -> dict[str, str]:
    """What the (fake) cluster runs now, as Slurm would show it."""
    from autosched.live.fake import FakeConnector

    return FakeConnector(state.parent / "fake").live_values()


def make_app(state: Path, **kw: Any):
    from autosched.live.agent import open_agent
    from autosched.service.app import create_app

    return create_app(state, token=TOKEN, open_agent=lambda: open_agent(state), **kw)


@contextmanager
def serve_in_thread(app) -> Iterator[str]:
    """The app on a real socket on 127.0.0.1 (any free port), served by uvicorn in a thread."""
    import uvicorn

    from autosched.service.serve import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise RuntimeError("the service did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        t.join(15)
        sock.close()


def serve_process(state: Path, *argv: str) -> ContextManager[tuple[str, subprocess.Popen[str]]]:
    """`autosched agent serve` in its own process on a free port; stopped by its pid."""
    return serve_in_process(state, *argv, src=SRC)


AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def call(url: str, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """(status, body) of one request to the service at `url` (an error status too)."""
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
