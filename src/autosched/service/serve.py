"""Run the service: resolve the token, bind the socket, serve with uvicorn until stopped."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError, LiveError
from . import DEFAULT_HOST, DEFAULT_PORT
from .token import load_or_create_token

# The line `serve` writes once it listens; `serve_in_process` reads the address from it.
SERVING = "serving "
# s a stopping service waits for requests in flight: an approve or a rollback against a hung
# slurmctld ends within about three minutes (Slurm's command timeouts); the units' stop timeout
# is longer still
GRACE_S = 300


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: any free port; the caller reads which)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(state_dir: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          token_file: Path | None = None, log: Callable[[str], None] | None = None) -> None:
    """Serve the agent in `state_dir` until interrupted (SIGINT/SIGTERM stop it cleanly).

    Reads are open only when bound to a loopback address; elsewhere they need the token too.
    `log` gets the two lines said at start; after them, every action and every request that is
    not a read is one JSON line on standard error (live/events_log.py)."""
    import uvicorn

    from ..live.agent import Agent, open_agent, start_agent
    from ..live.events_log import JsonLog
    from .app import create_app

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    state_dir = Path(state_dir)
    token, path, new = load_or_create_token(state_dir, token_file)
    log(f"token: {'generated into ' if new else ''}{path}")
    loopback = is_loopback(host)
    if not loopback:
        log(f"warning: listening on {host}, not on localhost: reads need the token as well")
    events = JsonLog()

    def logged_agent() -> Agent:
        agent = open_agent(state_dir)
        agent.log = events.message
        agent.sinks.append(events)
        return agent

    try:  # finish an apply a killed process left, once, here: a page or status only reads
        start_agent(state_dir, log=log)
    except LiveError as e:
        log(f"not reconciled at start: {e}")
    app = create_app(state_dir, token=token, open_agent=logged_agent,
                     open_reads=loopback, allowed_hosts=[] if loopback else ["*"],
                     log=events.write)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    log(f"{SERVING}{state_dir} on http://{shown}:{bound}/ (API schema: /api/openapi.json)")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=GRACE_S)
    uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def serve_in_process(state_dir: Path, *argv: str, src: str | None = None,
                     timeout: float = 60.0) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`autosched agent serve` in a process of its own on a free port, for tests, benchmarks
    and scripts: yields (base URL, process) once it listens, and stops it by its pid on exit.

    `argv` adds options; `src` puts a source tree first on the child's PYTHONPATH."""
    exe = str(Path(sys.executable).with_name("autosched"))
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    proc = subprocess.Popen([exe, "agent", "serve", "--state", str(state_dir), "--port", "0", *argv],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        url: str | None = None
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        assert proc.stderr is not None  # stderr=PIPE
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise LiveError("the service exited: " + "".join(lines))
            lines.append(line)
            if line.startswith(SERVING):
                url = line.split(" on ", 1)[1].split("/ ")[0]
        if url is None:
            raise LiveError("the service did not say where it listens: " + "".join(lines))
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
