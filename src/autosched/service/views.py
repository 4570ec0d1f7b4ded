"""What the API and the page show, taken from the store and the agent once per request.

Kept apart from the routes so that the JSON and the HTML page can never disagree."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ..live.records import JudgedOutcome, Revision, RevisionKind, RevisionState
from ..live.status import AgentStatus, read_status
from ..live.store import RevisionStore


class StatusSource(Protocol):
    """The part of `autosched.live.agent.Agent` the views read."""

    def status(self, history: int = 10) -> AgentStatus: ...
    def slurm_texts(self, config: dict[str, Any]) -> dict[str, str] | None: ...


@dataclass(frozen=True)
class OutcomeRow:
    """One applied revision's predicted gain (with its spread) against its counterfactual gain and
    the twin's error over the period after it went live (the judge's, `JudgedOutcome`): a row of
    ``GET /api/outcomes`` and a point of the page's plot."""

    revision: int
    applied_at: float | None
    state: RevisionState
    predicted_gain: float | None
    spread: float | None
    counterfactual_gain: float | None
    twin_error: float | None
    outcome: JudgedOutcome | None
    samples: int | None = None  # workloads the prediction was made on (1: no spread measured)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        return d


def outcomes(history: list[Revision]) -> list[OutcomeRow]:
    """Every revision that went live, oldest first: the per-period prediction and outcome."""
    rows = []
    for rev in reversed(history):
        if rev.applied_at is None:
            continue
        # what the agent recorded: its evidence at proposal, its judge's outcome one period on
        judged = rev.outcome
        rows.append(OutcomeRow(rev.id, rev.applied_at, rev.state, rev.evidence.predicted_gain,
                               rev.evidence.spread, judged.counterfactual_gain if judged else None,
                               judged.twin_error if judged else None, judged,
                               rev.evidence.samples))
    return rows


def proposals(history: list[Revision]) -> list[Revision]:
    """What the agent (or an operator) proposed, in auto mode too, whatever became of it, newest
    first: not the config found live or adopted, and not rollbacks (an operator's or the guard's
    return to an earlier config, recorded as a revision of their own)."""
    return [r for r in history if r.kind is RevisionKind.PROPOSAL]


def status(store: RevisionStore, agent: StatusSource | None, agent_error: str = "",
           history: int = 10) -> AgentStatus:
    """The status the API returns and the page shows at its top: the agent's own status
    (`Agent.status`), or, when the agent cannot be opened, what the store alone says and why."""
    if agent is not None:
        return agent.status(history)
    return read_status(store, history=history, agent_error=agent_error)


def slurm_settings(agent: StatusSource | None, config: dict[str, Any]) -> dict[str, str] | None:
    """`config` as the Slurm settings the agent writes; None without an agent."""
    return agent.slurm_texts(config) if agent is not None else None
