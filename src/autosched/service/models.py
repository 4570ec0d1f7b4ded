"""The API's request and response bodies: what the OpenAPI schema documents and what requests
are validated against (an unknown field, a negative revision or an over-long reason is a 422)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

State = Literal["proposed", "applied", "rejected", "rolled_back", "failed"]
# Who acted, as recorded in the revision's events ("operator:NAME"); letters, digits and ._@-
OperatorName = Field(default=None, pattern=r"^[A-Za-z0-9._@-]{1,64}$",
                     description="recorded as operator:NAME (default: service:token)")
Note = Field(default="", max_length=1000)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ApproveIn(_In):
    operator: str | None = OperatorName


class RejectIn(_In):
    operator: str | None = OperatorName
    reason: str = Note


class RollbackIn(_In):
    operator: str | None = OperatorName
    revision: int | None = Field(default=None, ge=1,
                                 description="the revision to return to (default: the one applied "
                                             "before the running one)")


class FreezeIn(_In):
    operator: str | None = OperatorName
    reason: str = Note


class UnfreezeIn(_In):
    operator: str | None = OperatorName


class EventOut(BaseModel):
    time: float = Field(description="unix seconds")
    state: State
    actor: str
    note: str


class RevisionOut(BaseModel):
    id: int
    created: float
    state: State
    config: dict[str, Any] = Field(description="the full managed live config")
    diff: dict[str, list[Any]] = Field(description="knob -> [before, after] against `parent`")
    parent: int | None
    trigger: str
    evidence: dict[str, Any] = Field(description="predicted_gain, spread, samples, tuning cost, ...")
    events: list[EventOut]
    outcome: dict[str, Any] | None = Field(description="one period after applying: observed vs "
                                                        "predicted")
    applied_at: float | None = Field(description="when it last went live")
    slurm: dict[str, str] | None = Field(default=None, description="the config as the Slurm "
                                         "settings the agent writes (status only)")


class FlagsOut(BaseModel):
    frozen: bool
    frozen_reason: str
    frozen_by: str
    blocked: str = Field(description="why the agent will not propose, or ''")


class StatusOut(FlagsOut):
    running: RevisionOut | None
    pending: RevisionOut | None
    mode: Literal["propose", "auto"] | None = Field(description="None if the agent cannot be "
                                                                "opened (see agent_error)")
    next_round: float | None = Field(description="unix seconds of the agent's next round")
    last_round: float | None = Field(description="unix seconds of the agent's last round")
    last_round_summary: dict[str, Any] | None = Field(description="what the last round found "
                                                                  "and did (action, why)")
    policy: str | None
    period: float | None = Field(description="seconds between rounds")
    connector: dict[str, Any] | None
    interrupted_apply: int | None = Field(description="revision of an apply a killed process "
                                                      "left open, if any")
    revisions: int
    agent_error: str = Field(description="why the agent could not be opened, or ''")
    version: str = Field(description="changes whenever the status changes (the page polls it)")


class OutcomeOut(BaseModel):
    revision: int
    applied_at: float | None
    state: State
    predicted_gain: float | None
    spread: float | None
    observed_gain: float | None
    outcome: dict[str, Any] | None


class ErrorOut(BaseModel):
    detail: str
