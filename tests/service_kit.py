"""Shared by the service's tests: a store seeded by hand, the service on a real socket (in a
thread or in its own process), and -- until the live branch's Agent is merged -- a stand-in with
the contract's action methods over the real store."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from autosched.live.errors import ActionNotAllowed
from autosched.live.store import Flags, Revision, RevisionState, RevisionStore

SRC = str(Path(__file__).resolve().parents[1] / "src")
TOKEN = "test-token-0123456789abcdef"
P, A, R, RB = (RevisionState.PROPOSED, RevisionState.APPLIED, RevisionState.REJECTED,
               RevisionState.ROLLED_BACK)
BASE = {"PriorityWeightAge": 1000, "PriorityWeightFairshare": 10000, "PriorityMaxAge": "7-0",
        "SchedulerParameters": "bf_window=60"}


def seed(state: Path) -> RevisionStore:
    """Revision 1 applied (baseline), revision 2 proposed (PriorityWeightAge 1000 -> 5000)."""
    s = RevisionStore(state)
    s.create(BASE, trigger="baseline", actor="agent", state=A, note="found live")
    s.create({**BASE, "PriorityWeightAge": 5000}, trigger="period", actor="agent:propose",
             evidence={"predicted_gain": 0.08, "spread": 0.02, "samples": 8})
    return s


@dataclass(frozen=True)
class _Status:
    d: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.d


class StandInAgent:
    """The contract's actions on the real store, with no connector (stand-in until the Agent
    of branch `live` is merged)."""

    def __init__(self, state: Path) -> None:
        self.store = RevisionStore(state)

    def status(self) -> _Status:
        return _Status({"mode": "propose", "next_round": 1.8e9})

    def approve(self, rev_id: int, actor: str) -> Revision:
        if self.store.flags().frozen:
            raise ActionNotAllowed("the agent is frozen; unfreeze it first")
        return self.store.transition(rev_id, A, actor=actor, allowed_from=[P])

    def reject(self, rev_id: int, actor: str, reason: str = "") -> Revision:
        return self.store.transition(rev_id, R, actor=actor, note=reason, allowed_from=[P])

    def rollback(self, rev_id: int | None, actor: str) -> Revision:
        running = self.store.running()
        applied = [r for r in self.store.history() if r.applied_at() is not None
                   and (running is None or r.id != running.id)]
        if rev_id is None:
            if not applied:
                raise ActionNotAllowed("no earlier applied revision to roll back to")
            rev_id = applied[0].id
        target = self.store.get(rev_id)
        if target.applied_at() is None or (running and running.id == rev_id):
            raise ActionNotAllowed(f"revision {rev_id} was never applied or is running")
        new = self.store.create(target.config, trigger=f"rollback to {rev_id}", actor=actor,
                                state=A)
        if running:
            self.store.transition(running.id, RB, actor=actor, note=f"rolled back to {rev_id}")
        return self.store.get(new.id)

    def freeze(self, actor: str, reason: str = "") -> Flags:
        return self.store.freeze(actor, reason)

    def unfreeze(self, actor: str) -> Flags:
        return self.store.unfreeze(actor)


def make_app(state: Path, **kw: Any):
    from autosched.service.app import create_app

    return create_app(state, token=TOKEN, agent=lambda: StandInAgent(state), **kw)


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


@contextmanager
def serve_process(state: Path, *argv: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`autosched agent serve` in its own process on a free port; stopped by its pid."""
    cmd = [sys.executable, "-c", _SERVE_STANDIN, str(state), *argv]
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + str(Path(__file__).parent)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    url = None
    try:
        deadline = time.monotonic() + 60
        lines = []
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError("the service exited: " + "".join(lines))
            lines.append(line)
            if line.startswith("serving "):
                url = line.split(" on ", 1)[1].split("/ ")[0]
        if url is None:
            raise RuntimeError("the service did not say where it listens: " + "".join(lines))
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


_SERVE_STANDIN = """
import sys
from pathlib import Path
from service_kit import StandInAgent
from autosched.service.serve import serve
state = Path(sys.argv[1])
args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
serve(state, host=args.get("--host", "127.0.0.1"), port=int(args.get("--port", "0")),
      token_file=Path(args["--token-file"]) if "--token-file" in args else None,
      open_agent=StandInAgent)
"""


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium(width: int = 1280, height: int = 1400):
    """Debian's headless Chromium through its chromedriver (no Selenium Manager, no network)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--window-size={width},{height}", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
