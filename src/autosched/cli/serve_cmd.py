"""``autosched agent serve``: the operator's HTTP API and status page over the agent's state."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import InputError
from ..service import DEFAULT_HOST, DEFAULT_PORT


def serve_cmd(
    state: Annotated[Path | None, typer.Option(
        "--state", help="the agent's state directory (revision store, settings, service.token) "
        "[default: $AUTOSCHED_STATE or ~/.autosched]")] = None,
    host: Annotated[str, typer.Option(envvar="AUTOSCHED_HOST", help="Address to listen on. Keep "
                                      "it on localhost and reach it through an SSH tunnel; "
                                      "elsewhere reads need the token too.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(min=0, max=65535, envvar="AUTOSCHED_PORT", help="Port (0: "
                                      "any free one, printed at start).")] = DEFAULT_PORT,
    token_file: Annotated[Path | None, typer.Option(help="Your own token (a file readable by you "
                          "only). Default: STATE/service.token, generated on first start.")] = None,
) -> None:
    """Serve the JSON API (schema at /api/openapi.json), the status page at / and Prometheus
    metrics at /metrics until stopped.

    Reads are open on localhost; every action (approve, reject, rollback, freeze, unfreeze)
    needs 'Authorization: Bearer TOKEN'. Logs one JSON line per action on standard error."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:  # they are an extra
        raise InputError(f"the service needs the 'service' extra (pip install "
                         f"'autosched[service]'): {e}") from None
    from ..service.serve import serve
    from .common import default_state

    state = state or default_state()
    if not state.is_dir():
        raise InputError(f"{state}: no such state directory (run `autosched agent init` first)")
    serve(state, host=host, port=port, token_file=token_file, log=lambda m: typer.echo(m, err=True))
