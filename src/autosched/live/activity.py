"""What the agent tells the outside world it did: one `Activity` per round and per action.

The agent hands every `Activity` to its sinks (`Listeners.sinks`, each an `ActivitySink`) at the
point where the outcome is known: after a round is recorded, after an action took effect. Two
sinks exist: a JSON log line (`live.events_log.JsonLog`, in ``agent run`` and the service) and a
webhook (`live.notify.Webhook`, when the agent's settings name one). A sink never changes what
the agent does: one that raises is reported in the agent's log and the action stands.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from .records import Revision


class ActivityKind(str, Enum):
    """What happened; the value is the ``event`` of its log line."""

    ROUND = "round"
    APPROVE = "approve"
    REJECT = "reject"
    ROLLBACK = "rollback"
    FREEZE = "freeze"
    UNFREEZE = "unfreeze"
    ADOPT = "adopt"
    APPLY_FAILED = "apply_failed"  # an apply did not take: the previous settings came back
    RESTORE = "restore"  # an apply a killed process left was undone: Slurm reconfigured back
    INCLUDE = "include"  # a round rewrote the include file to carry slurm.conf's own entries


@dataclass(frozen=True)
class Activity:
    """One round or action, as it ended.

    A round carries its `action` (a `live.round.Action` value), `why` and `trigger`, and the
    agent's block note from before it (`blocked_before`), so that a sink can tell a new block from
    one that goes on. An action carries who did it and the revision it made or moved."""

    kind: ActivityKind
    actor: str
    why: str = ""
    revision: Revision | None = None
    action: str | None = None  # a round: what it did ("proposed", "blocked", ...)
    trigger: str | None = None  # a round: "period" or "drift: ..."
    blocked_before: str = ""  # a round: the block note before it ("" if none)
    seconds: float | None = None  # a round: how long it took
    time: float = field(default_factory=time.time)

    def to_record(self) -> dict[str, Any]:
        """The activity as a flat JSON object (a log line's fields after its time): a revision
        that went live (or was restored) with its diff, a round with its duration."""
        rec: dict[str, Any] = {"event": self.kind.value, "actor": self.actor}
        if self.action is not None:
            rec["action"] = self.action
        if self.trigger is not None:
            rec["trigger"] = self.trigger
        rec["why"] = self.why
        if self.revision is not None:
            rec["revision"] = self.revision.id
            rec["state"] = self.revision.state.value
            if self.revision.applied_at is not None or self.kind in (ActivityKind.RESTORE,
                                                                     ActivityKind.APPLY_FAILED):
                rec["diff"] = {k: list(v) for k, v in self.revision.diff.items()}
        if self.seconds is not None:
            rec["seconds"] = round(self.seconds, 3)
        return rec


class ActivitySink(Protocol):
    """Receives every `Activity` of an agent, in the process that did it. Must return soon
    (a round waits for it) and should not raise."""

    def __call__(self, activity: Activity) -> None: ...


class Listeners:
    """Who hears of what the agent does: `log` gets its free-text messages, each of `sinks`
    every `Activity`. One object, shared by the agent's parts, so that a log or a sink set on
    the agent (``agent run``, the service) is the one every part uses."""

    def __init__(self, log: Callable[[str], None] = lambda msg: None,
                 sinks: Sequence[ActivitySink] = ()) -> None:
        self.log = log
        self.sinks: list[ActivitySink] = list(sinks)

    def say(self, message: str) -> None:
        self.log(message)

    def tell(self, activity: Activity) -> None:
        """Hand `activity` to every sink; a sink that fails is said in the log, never raised."""
        for sink in self.sinks:
            try:
                sink(activity)
            except Exception as e:  # noqa: BLE001 - a sink must not undo what was done
                self.log(f"{type(sink).__name__} failed on {activity.kind.value}: {e}")
