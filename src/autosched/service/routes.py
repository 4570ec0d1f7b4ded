"""The service's routes, in two routers: reads (open when the service is bound to localhost,
else behind the token) and actions (always behind the token). Each route reads the one
`ServiceState` (`state.service`) and nothing else; what an error becomes is decided once, in
app.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..errors import LiveError
from . import metrics, page, views
from .guard import UNAUTHORISED
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
from .state import STATUS_HISTORY, AgentLike, ServiceState, service
from .token import token_matches

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "missing or wrong bearer token; nothing changed"},
    404: {"model": ErrorOut, "description": "no such revision"},
    409: {"model": ErrorOut, "description": "the state does not allow it; says why"},
    413: {"model": ErrorOut, "description": "request body too large; nothing read"},
    503: {"model": ErrorOut, "description": "the scheduler or the store did not answer, or "
                                            "the store was replaced by something else"},
}
_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
Service = Annotated[ServiceState, Depends(service)]


def _authorised(request: Request, creds: HTTPAuthorizationCredentials | None) -> None:
    if creds is None or not token_matches(creds.credentials, service(request).token):
        raise HTTPException(401, UNAUTHORISED, headers={"WWW-Authenticate": "Bearer"})


def need_token(request: Request, creds: Credentials) -> None:
    """Every action: the bearer token, or 401 before anything is touched."""
    _authorised(request, creds)


def need_read(request: Request, creds: Credentials) -> None:
    """Reads: open when the service allows it (bound to localhost), else as actions."""
    if not service(request).open_reads:
        _authorised(request, creds)


reads = APIRouter(dependencies=[Depends(need_read)])
actions = APIRouter(dependencies=[Depends(need_token)])


@reads.get("/api/status", response_model=StatusOut, responses=ERRORS,
           summary="Running revision, pending proposal, newest revisions, mode, frozen/blocked "
                   "and why, last and next round: the record `agent status --json` prints")
def get_status(svc: Service, history: Annotated[int, Query(ge=0, le=page.HISTORY_ROWS)] = STATUS_HISTORY
               ) -> Response:
    return Response(svc.status_entry(history)[2], media_type="application/json")


@reads.get("/metrics", response_class=PlainTextResponse,
           responses={200: {"content": {metrics.CONTENT_TYPE: {}}}},
           summary="The agent's state for Prometheus (text format 0.0.4): running revision and "
                   "knobs, pending gain, rounds by action, frozen, blocked, last round, twin "
                   "error")
def get_metrics(svc: Service) -> Response:
    key, status, _ = svc.status_entry()
    return Response(metrics.render(status, svc.round_counts(key), str(svc.state_dir)),
                    media_type=metrics.CONTENT_TYPE)


@reads.get("/api/revisions", response_model=RevisionsOut,
           summary="Every revision with its config, diff, evidence, events, outcome and "
                   "approval, newest first")
def list_revisions(svc: Service, limit: Annotated[int | None, Query(ge=1, le=10_000)] = None
                   ) -> list[dict[str, Any]]:
    return [r.to_dict() for r in svc.store().history(limit)]


@reads.get("/api/revisions/{rev_id}", response_model=RevisionOut, responses=ERRORS,
           summary="One revision")
def get_revision(svc: Service, rev_id: int) -> dict[str, Any]:
    return svc.store().get(rev_id).to_dict()


@reads.get("/api/revisions/{rev_id}/preview", response_model=PreviewOut, responses=ERRORS,
           summary="The include file exactly as approving this proposal would write it, and "
                   "its diff against the file now (send the diff back with the approve)")
def preview(svc: Service, rev_id: int) -> dict[str, Any]:
    return svc.agent().preview(rev_id).to_dict()


@reads.get("/api/proposals", response_model=RevisionsOut,
           summary="Every revision that began as a proposal (whatever became of it), newest "
                   "first")
def list_proposals(svc: Service) -> list[dict[str, Any]]:
    return [r.to_dict() for r in views.proposals(svc.store().history())]


@reads.get("/api/outcomes", response_model=OutcomesOut,
           summary="Per applied revision: predicted gain and spread against the counterfactual "
                   "gain and the twin's error one period on, oldest first")
def list_outcomes(svc: Service) -> list[dict[str, Any]]:
    return [o.to_dict() for o in views.outcomes(svc.store().history())]


def _actor(operator: str | None) -> str:
    return f"operator:{operator}" if operator else "service:token"


@actions.post("/api/revisions/{rev_id}/approve", response_model=RevisionOut, responses=ERRORS,
              summary="Apply a proposal to the cluster (with `include_diff`: only if the include "
                      "file is written as that diff says)")
def approve(svc: Service, rev_id: int, body: Annotated[ApproveIn | None, Body()] = None) -> dict[str, Any]:
    body = body or ApproveIn()
    ag = svc.agent()
    with svc.lock:
        return ag.approve(rev_id, _actor(body.operator), body.include_diff, force=body.force).to_dict()


@actions.post("/api/revisions/{rev_id}/reject", response_model=RevisionOut, responses=ERRORS,
              summary="Reject a proposal")
def reject(svc: Service, rev_id: int, body: Annotated[RejectIn | None, Body()] = None) -> dict[str, Any]:
    body = body or RejectIn()
    ag = svc.agent()
    with svc.lock:
        return ag.reject(rev_id, _actor(body.operator), body.reason).to_dict()


@actions.post("/api/rollback", response_model=RevisionOut, responses=ERRORS,
              summary="Return to an earlier revision (default: the one applied before the "
                      "running one)")
def rollback(svc: Service, body: Annotated[RollbackIn | None, Body()] = None) -> dict[str, Any]:
    body = body or RollbackIn()
    ag = svc.agent()
    with svc.lock:
        return ag.rollback(body.revision, _actor(body.operator), force=body.force).to_dict()


@actions.post("/api/freeze", response_model=FlagsOut, responses=ERRORS,
              summary="Kill switch: the agent proposes and applies nothing until unfrozen")
def freeze(svc: Service, body: Annotated[FreezeIn | None, Body()] = None) -> dict[str, Any]:
    body = body or FreezeIn()
    # never behind the action lock: a freeze must not wait for an apply stuck on Slurm (it is
    # one store transaction, which another process's writes hold up for milliseconds)
    return svc.kill_switch().freeze(_actor(body.operator), body.reason).to_dict()


@actions.post("/api/unfreeze", response_model=FlagsOut, responses=ERRORS,
              summary="Let the agent propose again")
def unfreeze(svc: Service, body: Annotated[UnfreezeIn | None, Body()] = None) -> dict[str, Any]:
    body = body or UnfreezeIn()
    return svc.kill_switch().unfreeze(_actor(body.operator)).to_dict()


page_routes = APIRouter(dependencies=[Depends(need_read)], include_in_schema=False)


@page_routes.get("/", response_class=HTMLResponse)
def status_page(svc: Service) -> HTMLResponse:
    history = svc.store().history(limit=page.HISTORY_ROWS)
    status = svc.status_entry()[1]
    try:
        ag: AgentLike | None = svc.agent()
    except LiveError:
        ag = None
    return HTMLResponse(page.render(
        status, history, views.outcomes(history), state_dir=str(svc.state_dir),
        slurm=lambda config: views.slurm_settings(ag, config) if ag is not None else None))
