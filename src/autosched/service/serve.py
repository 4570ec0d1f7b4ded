"""Run the service: resolve the token, bind the socket, serve with uvicorn until stopped."""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError
from . import DEFAULT_HOST, DEFAULT_PORT
from .token import load_or_create_token


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

    Reads are open only when bound to a loopback address; elsewhere they need the token too."""
    import uvicorn

    from ..live.agent import open_agent
    from .app import create_app

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    state_dir = Path(state_dir)
    token, path, new = load_or_create_token(state_dir, token_file)
    log(f"token: {'generated into ' if new else ''}{path}")
    loopback = is_loopback(host)
    if not loopback:
        log(f"warning: listening on {host}, not on localhost: reads need the token as well")
    app = create_app(state_dir, token=token, open_agent=lambda: open_agent(state_dir),
                     open_reads=loopback, allowed_hosts=[] if loopback else ["*"])
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    log(f"serving {state_dir} on http://{shown}:{bound}/ (API schema: /api/openapi.json)")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
