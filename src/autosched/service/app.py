"""The FastAPI application: JSON API, OpenAPI schema, status page.

Reads come from the `RevisionStore` (short SQLite connections; WAL lets them run beside the
agent's and the CLI's writes); the status, which clients poll, is kept until the store changes.
Actions call the `Agent` of the live contract under one lock per service, so two requests never
apply at once in this process; across processes the store's write transactions decide (one
approve wins, the others get a 409). The token is checked before the body is even validated.

Errors map to status codes in one place: `UnknownRevision` -> 404, `ActionNotAllowed` -> 409 with
the reason, any other `LiveError` (Slurm not answering, ...) -> 503, `InputError` -> 400.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Protocol

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ..errors import InputError, LiveError
from ..live.errors import ActionNotAllowed, UnknownRevision
from ..live.status import AgentStatus
from ..live.store import Flags, Revision, RevisionStore
from . import page, views
from .models import ApproveIn, ErrorOut, FlagsOut, FreezeIn, OutcomeOut, RejectIn, RevisionOut, RollbackIn, StatusOut, UnfreezeIn
from .token import token_matches


class AgentLike(Protocol):
    """The part of `autosched.live.agent.Agent` the service calls."""

    def status(self, history: int = 10) -> AgentStatus: ...
    def slurm_texts(self, config: dict[str, Any]) -> dict[str, str] | None: ...
    def approve(self, rev_id: int, actor: str) -> Revision: ...
    def reject(self, rev_id: int, actor: str, reason: str = "") -> Revision: ...
    def rollback(self, rev_id: int | None, actor: str) -> Revision: ...
    def freeze(self, actor: str, reason: str = "") -> Flags: ...
    def unfreeze(self, actor: str) -> Flags: ...


ERRORS = {401: {"model": ErrorOut, "description": "missing or wrong bearer token; nothing changed"},
          404: {"model": ErrorOut, "description": "no such revision"},
          409: {"model": ErrorOut, "description": "the state does not allow it; says why"},
          503: {"model": ErrorOut, "description": "the scheduler or the store did not answer"}}
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _authorised(request: Request, creds: HTTPAuthorizationCredentials | None) -> None:
    if creds is None or not token_matches(creds.credentials, request.app.state.token):
        raise HTTPException(401, "a valid bearer token is required (Authorization: Bearer TOKEN; "
                                 "the token is in the state directory's service.token)",
                            headers={"WWW-Authenticate": "Bearer"})


def need_token(request: Request, creds: Credentials) -> None:
    """Every action: the bearer token, or 401 before anything is touched."""
    _authorised(request, creds)


def need_read(request: Request, creds: Credentials) -> None:
    """Reads: open when the service allows it (bound to localhost), else as actions."""
    if not request.app.state.open_reads:
        _authorised(request, creds)


class StoreChanges:
    """Whether anything was committed to the store since it was last asked, by any process:
    SQLite's ``PRAGMA data_version`` on one connection of its own that never writes."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                                  isolation_level=None, timeout=30)
        self.lock = threading.Lock()

    def version(self) -> int:
        with self.lock:
            return self.db.execute("PRAGMA data_version").fetchone()[0]


STATUS_HISTORY = 10  # revisions in the status by default, as `agent status` lists


def _status_json(st: AgentStatus) -> bytes:
    return StatusOut.model_validate(st.to_dict()).model_dump_json().encode()


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def create_app(state_dir: Path, *, token: str, open_agent: Callable[[], AgentLike],
               open_reads: bool = True, allowed_hosts: list[str] | None = None) -> FastAPI:
    """The service over `state_dir`.

    `open_agent` opens the agent (`autosched.live.agent.open_agent` in production); it is called
    on first use and again after ``agent init`` rewrote the settings, so a service started
    before ``agent init`` still serves reads. Actions need `token`; reads need it too unless
    `open_reads` (the default, meant for a service bound to localhost). `allowed_hosts` are the
    Host headers accepted (default: loopback names), which keeps a web page on another site
    from reading the API through DNS rebinding."""
    store = RevisionStore(state_dir)
    lock = threading.Lock()  # held through an action (an apply can take seconds)
    opening = threading.Lock()  # reads must not wait for an action: a lock of their own
    opened: dict[str, Any] = {}
    settings = Path(state_dir) / "settings.json"

    def get_agent() -> AgentLike:
        """The agent, opened on first use and again when ``agent init`` rewrote its settings."""
        stamp = _stamp(settings)
        with opening:
            if "agent" not in opened or opened["stamp"] != stamp:
                opened["agent"] = open_agent()
                opened["stamp"] = stamp
            return opened["agent"]

    app = FastAPI(
        title="autosched agent", version="1",
        description="The operator's API over the autosched agent's revision store. Actions need "
                    "`Authorization: Bearer TOKEN` (the token is in STATE_DIR/service.token).",
        openapi_url="/api/openapi.json", docs_url=None, redoc_url=None,  # their pages load a CDN
    )
    app.add_middleware(TrustedHostMiddleware,
                       allowed_hosts=(allowed_hosts or []) + LOOPBACK_HOSTS)
    app.state.token, app.state.open_reads = token, open_reads
    reads = [Depends(need_read)]
    actions = [Depends(need_token)]

    @app.exception_handler(UnknownRevision)
    def _404(request: Request, e: UnknownRevision) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(ActionNotAllowed)
    def _409(request: Request, e: ActionNotAllowed) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=409)

    @app.exception_handler(LiveError)
    def _503(request: Request, e: LiveError) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=503)

    @app.exception_handler(InputError)
    def _400(request: Request, e: InputError) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=400)

    changes = StoreChanges(store.path)
    latest: dict[int, tuple[Any, AgentStatus, bytes]] = {}  # history -> (key, status, its JSON)

    def status_entry(history: int = STATUS_HISTORY) -> tuple[Any, AgentStatus, bytes]:
        # The status is a function of what the store holds and of the agent's settings, so it
        # is computed (and serialised) again only after a commit by any process or a new
        # `agent init`: it is what many clients poll, and computing it costs several store reads.
        # Keyed by the version read *before* computing, so it is never staler than the store.
        key = (changes.version(), _stamp(settings))
        entry = latest.get(history)
        if entry is not None and entry[0] == key:
            return entry
        try:
            ag = get_agent()
        except LiveError as e:
            # the store's part is worth showing even when the agent cannot be opened (no
            # `agent init` yet, settings unreadable): say why instead of failing; not kept
            st = views.status(store, None, str(e), history)
            return (None, st, _status_json(st))
        st = views.status(store, ag, history=history)
        entry = (key, st, _status_json(st))
        if len(latest) > 8:
            latest.clear()
        latest[history] = entry  # one assignment: threads see the old entry or the new, whole
        return entry

    @app.get("/api/status", response_model=StatusOut, dependencies=reads, responses=ERRORS,
             summary="Running revision, pending proposal, newest revisions, mode, frozen/blocked "
                     "and why, last and next round: the record `agent status --json` prints")
    def get_status(history: Annotated[int, Query(ge=0, le=page.HISTORY_ROWS)] = STATUS_HISTORY
                   ) -> Response:
        return Response(status_entry(history)[2], media_type="application/json")

    @app.get("/api/revisions", response_model=list[RevisionOut], dependencies=reads,
             summary="Every revision with its config, diff, evidence, events and outcome, "
                     "newest first")
    def list_revisions(limit: Annotated[int | None, Query(ge=1, le=10_000)] = None
                       ) -> list[dict[str, Any]]:
        return [r.to_dict() for r in store.history(limit)]

    @app.get("/api/revisions/{rev_id}", response_model=RevisionOut, dependencies=reads,
             responses=ERRORS, summary="One revision")
    def get_revision(rev_id: int) -> dict[str, Any]:
        return store.get(rev_id).to_dict()

    @app.get("/api/proposals", response_model=list[RevisionOut], dependencies=reads,
             summary="Every revision that began as a proposal (whatever became of it), newest "
                     "first")
    def list_proposals() -> list[dict[str, Any]]:
        return [r.to_dict() for r in views.proposals(store.history())]

    @app.get("/api/outcomes", response_model=list[OutcomeOut], dependencies=reads,
             summary="Per applied revision: predicted gain and spread against the observed one, "
                     "oldest first")
    def list_outcomes() -> list[dict[str, Any]]:
        return [o.to_dict() for o in views.outcomes(store.history())]

    def actor(operator: str | None) -> str:
        return f"operator:{operator}" if operator else "service:token"

    @app.post("/api/revisions/{rev_id}/approve", response_model=RevisionOut, dependencies=actions,
              responses=ERRORS, summary="Apply a proposal to the cluster")
    def approve(rev_id: int, body: Annotated[ApproveIn | None, Body()] = None) -> dict[str, Any]:
        body = body or ApproveIn()
        ag = get_agent()
        with lock:
            return ag.approve(rev_id, actor(body.operator)).to_dict()

    @app.post("/api/revisions/{rev_id}/reject", response_model=RevisionOut, dependencies=actions,
              responses=ERRORS, summary="Reject a proposal")
    def reject(rev_id: int, body: Annotated[RejectIn | None, Body()] = None) -> dict[str, Any]:
        body = body or RejectIn()
        ag = get_agent()
        with lock:
            return ag.reject(rev_id, actor(body.operator), body.reason).to_dict()

    @app.post("/api/rollback", response_model=RevisionOut, dependencies=actions, responses=ERRORS,
              summary="Return to an earlier revision (default: the one applied before the "
                      "running one)")
    def rollback(body: Annotated[RollbackIn | None, Body()] = None) -> dict[str, Any]:
        body = body or RollbackIn()
        ag = get_agent()
        with lock:
            return ag.rollback(body.revision, actor(body.operator)).to_dict()

    @app.post("/api/freeze", response_model=FlagsOut, dependencies=actions, responses=ERRORS,
              summary="Kill switch: the agent proposes and applies nothing until unfrozen")
    def freeze(body: Annotated[FreezeIn | None, Body()] = None) -> dict[str, Any]:
        body = body or FreezeIn()
        ag = get_agent()
        with lock:
            return ag.freeze(actor(body.operator), body.reason).to_dict()

    @app.post("/api/unfreeze", response_model=FlagsOut, dependencies=actions, responses=ERRORS,
              summary="Let the agent propose again")
    def unfreeze(body: Annotated[UnfreezeIn | None, Body()] = None) -> dict[str, Any]:
        body = body or UnfreezeIn()
        ag = get_agent()
        with lock:
            return ag.unfreeze(actor(body.operator)).to_dict()

    @app.get("/", response_class=HTMLResponse, dependencies=reads, include_in_schema=False)
    def status_page() -> HTMLResponse:
        history = store.history(limit=page.HISTORY_ROWS)
        status = status_entry()[1]
        try:
            ag: AgentLike | None = get_agent()
        except LiveError:
            ag = None
        return HTMLResponse(page.render(
            status, history, views.outcomes(history), state_dir=str(state_dir),
            slurm=lambda config: views.slurm_settings(ag, config) if ag is not None else None))

    return app
