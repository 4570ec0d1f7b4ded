"""What an operator (or the agent's own guard and judge) does to the agent: preview, approve,
reject, rollback, adopt, freeze, unfreeze.

Each action that writes to Slurm first finishes an apply a killed process left
(`Applier.reconcile`), never applies blind (Slurm must answer, and show no hand edit, before
anything is written; `force` discards a hand edit and records it), and ends by telling the
agent's listeners (`Activity`). The store's transition table refuses what a state does not
allow, inside the write's transaction.
"""

from __future__ import annotations

import time
from typing import NoReturn

from .activity import Activity, ActivityKind, Listeners
from .applying import Applier
from .approval import IncludePreview, apply_header, preview_of, same_diff
from .errors import ActionNotAllowed, UnreadableValue
from .killswitch import KillSwitch
from .records import Approval, Evidence, Flags, LiveOverride, Revision, RevisionKind, RevisionState
from .view import ClusterView, overrides_text


class OperatorActions:
    """The agent's actions on revisions and flags (see the module doc)."""

    def __init__(self, view: ClusterView, applier: Applier, listeners: Listeners):
        self.view, self.applier, self.listeners = view, applier, listeners
        self.store = view.store

    def preview(self, rev_id: int) -> IncludePreview:
        """The include file as approving proposal `rev_id` would write it, and its diff against
        the file now (live/approval.py). Writes nothing."""
        rev = self._proposed(rev_id)
        change = self.view.connector.preview(self.view.settings_of(rev.config),
                                             header=apply_header(rev, self.store.path))
        return preview_of(rev.id, change)

    def approve(self, rev_id: int, actor: str, confirmed_diff: str | None = None,
                force: bool = False) -> Revision:
        """Apply proposal `rev_id` now (through the connector; checked, restored on failure),
        recording who approved and the include file's diff. With `confirmed_diff` (the diff the
        approver was shown, `preview`), refused unless the file would be written so. Refused
        over a hand edit (a live value that is not the running revision's) unless `force`: then
        the live values it discards are recorded with the apply (`Revision.overridden`)."""
        restored = self.applier.reconcile()
        rev = self._proposed(rev_id, restored)
        flags = self.store.flags()
        if flags.frozen:
            raise ActionNotAllowed(f"the agent is frozen by {flags.frozen_by}"
                                   f"{': ' + flags.frozen_reason if flags.frozen_reason else ''}; "
                                   "unfreeze it first")
        running = self.view.running_or_baseline()
        if rev.parent != running.id:
            self._refuse_approve(rev_id, f"revision {rev_id} was proposed against revision "
                                 f"{rev.parent}, but revision {running.id} is running; reject "
                                 "it and let the agent propose again")
        edited = self.view.live_overrides(running)
        if edited and not force:
            self._refuse_approve(rev_id, edited_why(running, edited, "approve"))
        seen = self.preview(rev_id)
        if confirmed_diff is not None and not same_diff(confirmed_diff, seen.diff):
            raise ActionNotAllowed(f"the include file would now be written differently from the "
                                   f"diff confirmed for revision {rev_id}; look at it again")
        done = self.applier.apply(rev, actor, f"approved by {actor}" + forced(edited),
                                  approval=Approval(actor, seen.diff, confirmed_diff is not None,
                                                    time.time()), overridden=edited)
        self.listeners.tell(Activity(ActivityKind.APPROVE, actor, f"approved by {actor}", done))
        return done

    def _proposed(self, rev_id: int, restored: str = "") -> Revision:
        """Revision `rev_id`, refused unless it is proposed. One whose apply was interrupted is
        failed: the refusal says so, and whether the settings before it were restored just now
        (`restored`: by this action's reconcile, which reconfigured Slurm)."""
        rev = self.store.get(rev_id)
        if rev.state is not RevisionState.PROPOSED:
            last = rev.events[-1]
            if rev.state is RevisionState.FAILED and last.actor == "agent:reconcile":
                when = "just now, by this command" if restored else "since"
                raise ActionNotAllowed(
                    f"revision {rev_id} is failed: its apply was interrupted ({last.note}); the "
                    f"settings before it were restored {when}, and Slurm runs them. A failed "
                    "revision cannot be approved: the agent proposes again at its next round")
            raise ActionNotAllowed(f"revision {rev_id} is {rev.state.value}; only a proposed "
                                   "revision can be approved")
        return rev

    def _refuse_approve(self, rev_id: int, reason: str) -> NoReturn:
        """Refuse an approve with `reason`, unless the store moved on since the checks began:
        another process that approved the same revision at the same moment changes both the
        running revision and the live config, and the loser must say that, not report the
        winner's apply as a hand edit."""
        self._proposed(rev_id)
        if (intent := self.store.open_apply()) is not None and intent.owner_alive():
            raise ActionNotAllowed(f"revision {intent.rev_id} is being applied by pid "
                                   f"{intent.pid} right now; wait for it to finish")
        raise ActionNotAllowed(reason)

    def reject(self, rev_id: int, actor: str, reason: str = "") -> Revision:
        rev = self.store.transition(rev_id, RevisionState.REJECTED, actor=actor,
                                    note=reason or "rejected")
        self.listeners.tell(Activity(ActivityKind.REJECT, actor, reason or "rejected", rev))
        return rev

    def rollback(self, rev_id: int | None, actor: str, note: str = "",
                 force: bool = False) -> Revision:
        """Make the config of revision `rev_id` (None: the one applied before the running one)
        live again, as a new revision; the running one is marked rolled back. Allowed while
        frozen (it is how an operator gets back to a known state). Refused over a hand edit
        unless `force`, as `approve`."""
        self.applier.reconcile()
        running = self.view.running_or_baseline()
        target = self._rollback_target(rev_id, running)
        # never apply blind: Slurm must answer, and show no hand edit, before anything is written
        edited = self.view.live_overrides(running)
        if edited and not force:
            raise ActionNotAllowed(edited_why(running, edited, "rollback"))
        if (p := self.store.pending()) is not None:
            self.store.transition(p.id, RevisionState.REJECTED, actor=actor,
                                  note=f"superseded by a rollback to revision {target.id}")
        new = self.store.create(target.config, kind=RevisionKind.ROLLBACK,
                                trigger=f"rollback to {target.id}", actor=actor,
                                note=note or f"rollback to revision {target.id}", parent=running.id,
                                evidence=Evidence(rollback_of=running.id, to=target.id))
        why = (note or f"rollback to revision {target.id} by {actor}") + forced(edited)
        # an operator's rollback works while frozen (how one gets back to a known state); the
        # agent's own (the guard's) stops at a freeze as every apply does
        done = self.applier.apply(new, actor, why, overridden=edited,
                                  replaced_note=f"rolled back to revision {target.id} (revision "
                                                f"{new.id}) by {actor}{': ' + note if note else ''}",
                                  while_frozen=not actor.startswith("agent:"))
        self.listeners.tell(Activity(ActivityKind.ROLLBACK, actor, why, done))
        return done

    def _rollback_target(self, rev_id: int | None, running: Revision) -> Revision:
        """The revision a rollback from `running` returns to (see `rollback`)."""
        if rev_id is None:
            earlier = [r for r in self.store.history() if r.id != running.id and
                       r.applied_at is not None and r.id < running.id]
            if not earlier:
                raise ActionNotAllowed(f"revision {running.id} is the only one ever applied; "
                                       "there is nothing to roll back to")
            target = earlier[0]
        else:
            target = self.store.get(rev_id)
            if target.applied_at is None:
                raise ActionNotAllowed(f"revision {rev_id} was never applied ({target.state.value}); "
                                       "only a config that ran can be rolled back to")
        if target.id == running.id:
            raise ActionNotAllowed(f"revision {rev_id} is already running")
        if target.config == running.config:
            raise ActionNotAllowed(f"revision {target.id}'s config already runs (revision "
                                   f"{running.id} has the same); there is nothing to roll back")
        return target

    def freeze(self, actor: str, reason: str = "") -> Flags:
        """The kill switch (live/killswitch.py): the store alone, or the stop file."""
        return self._kill_switch().freeze(actor, reason)

    def unfreeze(self, actor: str) -> Flags:
        return self._kill_switch().unfreeze(actor)

    def _kill_switch(self) -> KillSwitch:
        return KillSwitch(self.store.state_dir, self.listeners.sinks, self.listeners.say)

    def adopt(self, actor: str, note: str = "") -> Revision:
        """Record the live settings, as they are now, as the running revision (after a hand edit
        the operator wants to keep); this clears the hand-edit block. It counts as a change: the
        agent changes nothing for a period after it."""
        self.applier.reconcile()
        try:
            live = self.view.live_config()
        except UnreadableValue as e:
            # Slurm accepts more than autosched tunes (weights up to 2**32 - 1): say the way out
            raise ActionNotAllowed(
                f"cannot adopt the live settings: {e}, the range autosched tunes; set it inside "
                "that range (in the include file, then `scontrol reconfigure`) and adopt, or "
                "undo the edit") from None
        running = self.store.running()
        if running is not None and running.config == live:
            raise ActionNotAllowed(f"the live config already is revision {running.id}'s")
        if (p := self.store.pending()) is not None:
            self.store.transition(p.id, RevisionState.REJECTED, actor=actor,
                                  note="superseded: the live config was adopted")
        rev = self.store.create(live, kind=RevisionKind.ADOPTED, trigger="adopted", actor=actor,
                                note=note or "live settings adopted as they are")
        self.store.set_blocked("", actor)
        self.listeners.tell(Activity(ActivityKind.ADOPT, actor, note or "live settings adopted", rev))
        return rev


def edited_why(running: Revision, edited: tuple[LiveOverride, ...], action: str) -> str:
    """Why `action` is refused over the hand edit `edited`."""
    return (f"the live config differs from revision {running.id} ({overrides_text(running, edited)}): "
            f"a hand edit; adopt or undo that edit first, or {action} with force (--force, the "
            "API's `force`) to discard the live values (recorded with the revision)")


def forced(edited: tuple[LiveOverride, ...]) -> str:
    """What an apply's note adds when it was forced over a hand edit."""
    if not edited:
        return ""
    return "; forced over a hand edit, discarding " + ", ".join(
        f"{o.setting}={o.live}" for o in edited)
