"""What the API and the page show, taken from the store and the agent once per request.

Kept apart from the routes so that the JSON and the HTML page can never disagree."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..jsonable import jsonable
from ..live.store import Evidence, Revision, RevisionState, RevisionStore
from ..live.store import Outcome as JudgedOutcome

if TYPE_CHECKING:  # the agent module pulls in the whole tuning stack; the views need only its type
    from ..live.agent import Agent


def revision_dict(rev: Revision, agent: Agent | None = None) -> dict[str, Any]:
    d = rev.to_dict()
    d["applied_at"] = rev.applied_at()
    d["slurm"] = slurm_settings(agent, rev.config) if agent is not None else None
    return d


_SLURM_CACHE: dict[tuple[int, str], tuple[Any, dict[str, str] | None]] = {}


def slurm_settings(agent: Agent | None, config: dict[str, Any]) -> dict[str, str] | None:
    """Each managed knob of `config` as Slurm spells it (what `scontrol show config` shows), so
    that operators read 7-0, not 604800.0; None without an agent, or when its space cannot
    translate `config` (a knob it does not know, a value out of range).

    Remembered per (live space, config): a revision's config never changes, and translating it
    (validating the whole policy config) costs more than the rest of a status request."""
    space = agent.space if agent is not None else None
    key = (id(space), json.dumps(config, sort_keys=True, default=str))
    hit = _SLURM_CACHE.get(key)
    if hit is not None and hit[0] is space:  # the same space, not one that reused its id
        return hit[1]
    try:
        out = space.knob_texts(space.full(config)) if space is not None else None
    except (KeyError, ValueError):
        out = None
    _SLURM_CACHE[key] = (space, out)
    if len(_SLURM_CACHE) > 512:
        _SLURM_CACHE.pop(next(iter(_SLURM_CACHE)), None)
    return out


@dataclass(frozen=True)
class Outcome:
    """One applied revision's predicted gain (with its spread) against what was observed."""

    revision: int
    applied_at: float | None
    state: str
    predicted_gain: float | None
    spread: float | None
    observed_gain: float | None
    outcome: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def outcomes(history: list[Revision]) -> list[Outcome]:
    """Every revision that went live, oldest first: the per-period prediction and outcome."""
    rows = []
    for rev in reversed(history):
        if rev.applied_at() is None:
            continue
        # what the agent recorded: its evidence at proposal, its judge's outcome one period on
        ev, judged = Evidence.from_dict(rev.evidence), JudgedOutcome.from_dict(rev.outcome)
        rows.append(Outcome(rev.id, rev.applied_at(), rev.state.value, ev.predicted_gain,
                            ev.spread, judged.observed_gain if judged else None, rev.outcome))
    return rows


def proposals(history: list[Revision]) -> list[Revision]:
    """What the agent proposed (in auto mode too), whatever became of it, newest first: not the
    config found live or adopted, and not rollbacks (an operator's or the guard's return to an
    earlier config, recorded as a revision of their own)."""
    return [r for r in history if r.events and r.events[0].state is RevisionState.PROPOSED
            and not r.trigger.startswith("rollback")]


def status(store: RevisionStore, agent: Agent | None, agent_error: str = "") -> dict[str, Any]:
    """The status the API returns and the page shows at its top: the agent's own status
    (`Agent.status`), or, when the agent cannot be opened, what the store alone says and why."""
    if agent is not None:
        st = agent.status(1)
        running, pending = st.running, st.pending
        flags = {"frozen": st.frozen, "frozen_reason": st.frozen_reason,
                 "frozen_by": st.frozen_by, "blocked": st.blocked}
        newest = st.history
        extra = {"mode": st.mode, "next_round": st.next_round, "policy": st.policy,
                 "period": st.period, "connector": st.connector,
                 "last_round_summary": st.last_round, "interrupted_apply": st.interrupted_apply}
    else:
        running, pending = store.running(), store.pending()
        flags = store.flags().to_dict()
        newest = store.history(limit=1)
        extra = {"mode": None, "next_round": None, "policy": None, "period": None,
                 "connector": None, "last_round_summary": None, "interrupted_apply": None}
    last = store.last_round()
    out: dict[str, Any] = {
        **flags,
        "running": revision_dict(running, agent) if running else None,
        "pending": revision_dict(pending, agent) if pending else None,
        **extra,
        "last_round": last[0] if last else None,
        "revisions": newest[0].id if newest else 0,
        "agent_error": agent_error,
    }
    out["version"] = hashlib.sha1(json.dumps(
        [out["running"], out["pending"], flags, out["last_round"], out["revisions"],
         out["mode"], agent_error], sort_keys=True, default=str).encode()).hexdigest()[:16]
    return jsonable(out)
