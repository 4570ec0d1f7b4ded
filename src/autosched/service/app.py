"""The FastAPI application: JSON API, OpenAPI schema, status page.

Reads come from the `RevisionStore` (short SQLite connections; WAL lets them run beside the
agent's and the CLI's writes); the status, which clients poll, is kept until the store changes.
Actions call the `Agent` of the live contract under one lock per service, so two requests never
apply at once in this process (freeze and unfreeze do not take it: they write one flag and never
wait for an apply, whatever Slurm does); across processes the store's write transactions decide (one
approve wins, the others get a 409). Before a route sees a request, `guard.RequestGuard` checks
the token of every request with a body (before reading it) and caps the body's size.

The store is watched (`StoreWatch`): a ``state.db`` replaced under the running service is followed
when it is an agent's store, and otherwise every request is a 503 saying what happened, the status
included (never the status of the file that was there before).

Errors map to status codes in one place: `UnknownRevision` -> 404, `ActionNotAllowed` -> 409 with
the reason, any other `LiveError` (Slurm not answering, the store replaced, ...) -> 503,
`InputError` -> 400, a request that does not fit the schema -> 422 (without echoing it).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Protocol

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ..errors import InputError, LiveError
from ..live.approval import IncludePreview
from ..live.errors import ActionNotAllowed, UnknownRevision
from ..live.killswitch import KillSwitch
from ..live.records import Revision
from ..live.status import AgentStatus
from ..live.store import RevisionStore
from ..live.storefile import store_error
from . import metrics, page, views
from .guard import UNAUTHORISED, LogLine, RequestGuard, validation_error
from .models import (
    ApproveIn,
    ErrorOut,
    FlagsOut,
    FreezeIn,
    OutcomesOut,
    PreviewOut,
    RejectIn,
    RevisionOut,
    RevisionsOut,
    RollbackIn,
    StatusOut,
    UnfreezeIn,
)
from .token import token_matches


class AgentLike(Protocol):
    """The part of `autosched.live.agent.Agent` the service calls."""

    def status(self, history: int = 10) -> AgentStatus: ...
    def slurm_texts(self, config: dict[str, Any]) -> dict[str, str] | None: ...
    def preview(self, rev_id: int) -> IncludePreview: ...
    def approve(self, rev_id: int, actor: str, confirmed_diff: str | None = None,
                force: bool = False) -> Revision: ...
    def reject(self, rev_id: int, actor: str, reason: str = "") -> Revision: ...
    def rollback(self, rev_id: int | None, actor: str, note: str = "",
                 force: bool = False) -> Revision: ...


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing or wrong bearer token; nothing changed"},
    404: {"model": ErrorOut, "description": "no such revision"},
    409: {"model": ErrorOut, "description": "the state does not allow it; says why"},
    413: {"model": ErrorOut, "description": "request body too large; nothing read"},
    503: {"model": ErrorOut, "description": "the scheduler or the store did not answer, or "
                                            "the store was replaced by something else"},
}
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _authorised(request: Request, creds: HTTPAuthorizationCredentials | None) -> None:
    if creds is None or not token_matches(creds.credentials, request.app.state.token):
        raise HTTPException(401, UNAUTHORISED, headers={"WWW-Authenticate": "Bearer"})


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
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                                  isolation_level=None, timeout=30)
        self.lock = threading.Lock()

    def version(self) -> int:
        with self.lock:
            try:
                return self.db.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as e:
                raise store_error(self.path, e) from None

    def close(self) -> None:
        with self.lock:
            self.db.close()


class StoreReplaced(LiveError):
    """``state.db`` is no longer a store the service can serve (the service answers 503)."""


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class StoreWatch:
    """The revision store the service serves, and whether ``state.db`` is still that file.

    Each request asks `current()`: the same file (device and inode) is served as it is; a file
    put in its place is followed when it is an agent's store (a restored backup), with a fresh
    change counter; a removed file, or one that is not an agent's store, raises `StoreReplaced`
    with what happened, and nothing of the file that was there before is served."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.store = RevisionStore(self.state_dir)
        self.path = self.store.path
        self.ident = _ident(self.path)
        self.changes = StoreChanges(self.path)
        self.generation = 0  # how many times a replacement was followed
        self.lock = threading.Lock()

    def current(self) -> tuple[RevisionStore, StoreChanges, int]:
        ident = _ident(self.path)
        if ident != self.ident:
            with self.lock:
                ident = _ident(self.path)
                if ident != self.ident:
                    self._follow(ident)
        return self.store, self.changes, self.generation

    def _follow(self, ident: tuple[int, int] | None) -> None:
        if ident is None:
            raise StoreReplaced(f"{self.path} was removed while the service runs; put the store "
                                "back, or restart the service to begin a new one")
        try:
            store = RevisionStore(self.state_dir)  # refuses a database that is not a store
        except LiveError as e:
            raise StoreReplaced(f"{self.path} was replaced while the service runs, by a file that "
                                f"is not the agent's store: {e}") from None
        self.changes.close()
        self.store, self.changes = store, StoreChanges(self.path)
        self.ident = ident
        self.generation += 1


STATUS_HISTORY = 10  # revisions in the status by default, as `agent status` lists


def _status_json(st: AgentStatus) -> bytes:
    return StatusOut.model_validate(st.to_dict()).model_dump_json().encode()


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


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
    watch = StoreWatch(Path(state_dir))
    lock = threading.Lock()  # held through an action (an apply can take seconds)
    opening = threading.Lock()  # reads must not wait for an action: a lock of their own
    opened: dict[str, Any] = {}
    settings = Path(state_dir) / "settings.json"

    def get_agent() -> AgentLike:
        """The agent, opened on first use and again when ``agent init`` rewrote its settings
        (or the store was replaced by another agent's)."""
        stamp = (_stamp(settings), watch.current()[2])
        with opening:
            if "agent" not in opened or opened["stamp"] != stamp:
                opened["agent"] = open_agent()
                opened["stamp"] = stamp
            return opened["agent"]

    def kill_switch() -> KillSwitch:
        """Freeze and unfreeze with the store alone (never `open_agent`: settings a plugin
        policy or a hand edit made unloadable must not disable the kill switch), told to the
        log and to the webhook if its URL can be read."""
        from ..live.notify import Webhook, notify_url

        def say(message: str) -> None:
            if log is not None:
                log({"event": "message", "message": message})

        sinks: list[Any] = [] if log is None else [lambda a: log(a.to_record())]
        url = notify_url(Path(state_dir), say) if settings.exists() else None
        if url is not None:
            sinks.append(Webhook(url, str(state_dir), say))
        return KillSwitch(state_dir, sinks, say)

    def need_store() -> None:
        """Every route: the store is still one the service can serve (else 503, `StoreWatch`)."""
        watch.current()

    app = FastAPI(
        title="autosched agent", version="1",
        description="The operator's API over the autosched agent's revision store. Actions need "
                    "`Authorization: Bearer TOKEN` (the token is in STATE_DIR/service.token).",
        openapi_url="/api/openapi.json", docs_url=None, redoc_url=None,  # their pages load a CDN
        dependencies=[Depends(need_store)],
    )
    # the last added runs first: the Host check, then the token and the body's size
    app.add_middleware(RequestGuard, token=token, log=log)
    app.add_middleware(TrustedHostMiddleware,
                       allowed_hosts=(allowed_hosts or []) + LOOPBACK_HOSTS)
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
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

    latest: dict[int, tuple[Any, AgentStatus, bytes]] = {}  # history -> (key, status, its JSON)
    rounds: dict[str, Any] = {}  # the store's round counts by action, and the key they are for

    def status_entry(history: int = STATUS_HISTORY) -> tuple[Any, AgentStatus, bytes]:
        # The status is a function of what the store holds and of the agent's settings, so it
        # is computed (and serialised) again only after a commit by any process or a new
        # `agent init`: it is what many clients poll, and computing it costs several store reads.
        # Keyed by the version read *before* computing, so it is never staler than the store.
        store, changes, generation = watch.current()
        # and of the clock (whether the loop is alive, a round overdue): a minute at most
        key = (generation, changes.version(), _stamp(settings), int(time.time() // 30))
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

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=reads,
             responses={200: {"content": {metrics.CONTENT_TYPE: {}}}},
             summary="The agent's state for Prometheus (text format 0.0.4): running revision and "
                     "knobs, pending gain, rounds by action, frozen, blocked, last round, twin "
                     "error")
    def get_metrics() -> Response:
        key, status, _ = status_entry()
        store = watch.current()[0]
        if key is None or rounds.get("key") != key:
            rounds.update(key=key, counts=store.round_counts())
        return Response(metrics.render(status, rounds["counts"], str(state_dir)),
                        media_type=metrics.CONTENT_TYPE)

    @app.get("/api/revisions", response_model=RevisionsOut, dependencies=reads,
             summary="Every revision with its config, diff, evidence, events, outcome and "
                     "approval, newest first")
    def list_revisions(limit: Annotated[int | None, Query(ge=1, le=10_000)] = None
                       ) -> list[dict[str, Any]]:
        return [r.to_dict() for r in watch.current()[0].history(limit)]

    @app.get("/api/revisions/{rev_id}", response_model=RevisionOut, dependencies=reads,
             responses=ERRORS, summary="One revision")
    def get_revision(rev_id: int) -> dict[str, Any]:
        return watch.current()[0].get(rev_id).to_dict()

    @app.get("/api/revisions/{rev_id}/preview", response_model=PreviewOut, dependencies=reads,
             responses=ERRORS,
             summary="The include file exactly as approving this proposal would write it, and "
                     "its diff against the file now (send the diff back with the approve)")
    def preview(rev_id: int) -> dict[str, Any]:
        return get_agent().preview(rev_id).to_dict()

    @app.get("/api/proposals", response_model=RevisionsOut, dependencies=reads,
             summary="Every revision that began as a proposal (whatever became of it), newest "
                     "first")
    def list_proposals() -> list[dict[str, Any]]:
        return [r.to_dict() for r in views.proposals(watch.current()[0].history())]

    @app.get("/api/outcomes", response_model=OutcomesOut, dependencies=reads,
             summary="Per applied revision: predicted gain and spread against the counterfactual "
                     "gain and the twin's error one period on, oldest first")
    def list_outcomes() -> list[dict[str, Any]]:
        return [o.to_dict() for o in views.outcomes(watch.current()[0].history())]

    def actor(operator: str | None) -> str:
        return f"operator:{operator}" if operator else "service:token"

    @app.post("/api/revisions/{rev_id}/approve", response_model=RevisionOut, dependencies=actions,
              responses=ERRORS, summary="Apply a proposal to the cluster (with `include_diff`: "
                                        "only if the include file is written as that diff says)")
    def approve(rev_id: int, body: Annotated[ApproveIn | None, Body()] = None) -> dict[str, Any]:
        body = body or ApproveIn()
        ag = get_agent()
        with lock:
            return ag.approve(rev_id, actor(body.operator), body.include_diff,
                              force=body.force).to_dict()

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
            return ag.rollback(body.revision, actor(body.operator), force=body.force).to_dict()

    @app.post("/api/freeze", response_model=FlagsOut, dependencies=actions, responses=ERRORS,
              summary="Kill switch: the agent proposes and applies nothing until unfrozen")
    def freeze(body: Annotated[FreezeIn | None, Body()] = None) -> dict[str, Any]:
        body = body or FreezeIn()
        # never behind the action lock: a freeze must not wait for an apply stuck on Slurm (it
        # is one store transaction, which another process's writes hold up for milliseconds)
        return kill_switch().freeze(actor(body.operator), body.reason).to_dict()

    @app.post("/api/unfreeze", response_model=FlagsOut, dependencies=actions, responses=ERRORS,
              summary="Let the agent propose again")
    def unfreeze(body: Annotated[UnfreezeIn | None, Body()] = None) -> dict[str, Any]:
        body = body or UnfreezeIn()
        return kill_switch().unfreeze(actor(body.operator)).to_dict()

    @app.get("/", response_class=HTMLResponse, dependencies=reads, include_in_schema=False)
    def status_page() -> HTMLResponse:
        history = watch.current()[0].history(limit=page.HISTORY_ROWS)
        status = status_entry()[1]
        try:
            ag: AgentLike | None = get_agent()
        except LiveError:
            ag = None
        return HTMLResponse(page.render(
            status, history, views.outcomes(history), state_dir=str(state_dir),
            slurm=lambda config: views.slurm_settings(ag, config) if ag is not None else None))

    return app
