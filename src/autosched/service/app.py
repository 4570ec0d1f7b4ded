"""The FastAPI application: JSON API, OpenAPI schema, status page.

The routes are in routes.py (a router of reads, one of actions, and the page), and what they
share is one `ServiceState` on ``app.state.service`` (state.py). Reads come from the
`RevisionStore` (short SQLite connections; WAL lets them run beside the agent's and the CLI's
writes); the status, which clients poll, is kept until the store changes.
Actions call the `Agent` of the live contract under one lock per service, so two requests never
apply at once in this process (freeze and unfreeze do not take it: they write one flag and never
wait for an apply, whatever Slurm does); across processes the store's write transactions decide (one
approve wins, the others get a 409). Before a route sees a request, `guard.RequestGuard` checks
the token of every request with a body (before reading it) and caps the body's size.

The store is watched (`state.StoreWatch`): a ``state.db`` replaced under the running service is followed
when it is an agent's store, and otherwise every request is a 503 saying what happened, the status
included (never the status of the file that was there before).

Errors map to status codes in one place: `UnknownRevision` -> 404, `ActionNotAllowed` -> 409 with
the reason, any other `LiveError` (Slurm not answering, the store replaced, ...) -> 503,
`InputError` -> 400, a request that does not fit the schema -> 422 (without echoing it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ..errors import InputError, LiveError
from ..live.errors import ActionNotAllowed, UnknownRevision
from .guard import LogLine, RequestGuard, validation_error
from .routes import actions, page_routes, reads
from .state import AgentLike, ServiceState, service

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
# What an error becomes (Starlette answers an error by the handler of its nearest class).
STATUS_OF: tuple[tuple[type[Exception], int], ...] = (
    (UnknownRevision, 404), (ActionNotAllowed, 409), (LiveError, 503), (InputError, 400))


def _need_store(request: Request) -> None:
    """Every route: the store is still one the service can serve (else 503, `StoreWatch`)."""
    service(request).watch.current()


def create_app(state_dir: Path, *, token: str, open_agent: Callable[[], AgentLike],
               open_reads: bool = True, allowed_hosts: list[str] | None = None,
               log: LogLine | None = None) -> FastAPI:
    """The service over `state_dir`.

    `open_agent` opens the agent (`autosched.live.agent.open_agent` in production); it is called
    on first use and again after ``agent init`` rewrote the settings, so a service started
    before ``agent init`` still serves reads. Actions need `token`; reads need it too unless
    `open_reads` (the default, meant for a service bound to localhost). `allowed_hosts` are the
    Host headers accepted (default: loopback names), which keeps a web page on another site
    from reading the API through DNS rebinding. `log` receives a record (a JSON log line's
    fields) for every request that is not a read."""
    app = FastAPI(
        title="autosched agent", version="1",
        description="The operator's API over the autosched agent's revision store. Actions need "
                    "`Authorization: Bearer TOKEN` (the token is in STATE_DIR/service.token).",
        openapi_url="/api/openapi.json", docs_url=None, redoc_url=None,  # their pages load a CDN
        dependencies=[Depends(_need_store)],
    )
    app.state.service = ServiceState(Path(state_dir), token=token, open_agent=open_agent,
                                     open_reads=open_reads, log=log)
    # the last added runs first: the Host check, then the token and the body's size
    app.add_middleware(RequestGuard, token=token, log=log)
    app.add_middleware(TrustedHostMiddleware,
                       allowed_hosts=(allowed_hosts or []) + LOOPBACK_HOSTS)
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    for error, code in STATUS_OF:
        app.add_exception_handler(error, _answer(code))
    for router in (reads, actions, page_routes):
        app.include_router(router)
    return app


def _answer(code: int) -> Callable[[Request, Exception], JSONResponse]:
    """The handler that answers an error with `code` and its message."""
    def handle(request: Request, e: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=code)

    return handle
