"""Applying a revision to Slurm with a write-ahead intent, and finishing one a killed process
left (`Applier.reconcile`).

An apply snapshots what runs, opens the intent in the store (`RevisionStore.begin_apply`, which
checks the state rules in its transaction), has the connector write, reconfigure and verify,
and ends the intent: applied, or failed with the previous settings restored. A process killed
in between leaves the intent open; the next start, round or action restores the snapshot.
"""

from __future__ import annotations

import os

from ..errors import AutoschedError
from .activity import Activity, ActivityKind
from .approval import apply_header
from .connector import Connector
from .errors import LiveError, RestorePending
from .records import Approval, LiveOverride, Revision, RevisionState
from .store import RevisionStore
from .view import ClusterView


class Applier:
    """Makes revisions live, one at a time (see the module doc)."""

    def __init__(self, store: RevisionStore, connector: Connector, view: ClusterView):
        self.store, self.connector, self.view = store, connector, view

    def apply(self, rev: Revision, actor: str, note: str, replaced_note: str = "",
              min_interval: float | None = None, approval: Approval | None = None,
              overridden: tuple[LiveOverride, ...] = (), while_frozen: bool = False) -> Revision:
        """Make `rev` live and record it applied (with `note`, and `replaced_note` on the
        revision it replaces); on failure it is recorded failed and the error raised. With
        `min_interval`, refused unless the running revision is that old (auto mode). Refused
        (`Frozen`) while the agent is frozen, checked in the transaction that begins the apply,
        unless `while_frozen` (an operator's rollback)."""
        settings = self.view.settings_of(rev.config)
        snap = self.connector.snapshot()
        intent = self.store.begin_apply(rev.id, actor=actor, previous=snap,
                                        min_interval=min_interval, while_frozen=while_frozen)
        try:
            self.connector.apply(settings, header=apply_header(rev, self.store.path))
        except AutoschedError as e:
            self.store.end_apply(intent, state=RevisionState.FAILED, actor=actor,
                                 note=f"apply failed: {e}")
            # Slurm was reconfigured (to the revision, then back): said like a change
            self.view.listeners.tell(Activity(ActivityKind.APPLY_FAILED, actor, f"apply failed: {e}",
                                              self.store.get(rev.id)))
            raise
        except BaseException as e:
            # not an error the connector expected: put the old settings back before saying so
            try:
                self.connector.restore(snap)
                self.store.end_apply(intent, state=RevisionState.FAILED, actor=actor,
                                     note=f"apply interrupted ({type(e).__name__}); previous "
                                          "settings restored")
            except Exception:
                pass  # the intent stays open; the next start reconciles it
            raise
        try:
            self.store.end_apply(intent, state=RevisionState.APPLIED, actor=actor, note=note,
                                 replaced_note=replaced_note, approval=approval,
                                 overridden=overridden)
        except LiveError as e:
            # Slurm runs the revision but the store cannot say so (a full disk): put the
            # previous settings back at once, so that the store and Slurm agree (the intent
            # stays open; the next round or action closes it as failed)
            try:
                self.connector.restore(snap)
            except LiveError as e2:
                raise LiveError(f"{e}; revision {rev.id} runs in Slurm but is not recorded, and "
                                f"putting the previous settings back failed too: {e2}") from None
            raise LiveError(f"{e}; revision {rev.id} could not be recorded, so the previous "
                            "settings were put back") from None
        # the connector read every value back before it returned: Slurm runs these now
        self.view.record_reading(self.view.space.knob_texts(self.view.space.full(rev.config)))
        return self.store.get(rev.id)

    def reconcile(self) -> str:
        """Finish what a killed process left: an apply that began and never ended is undone
        (the snapshot it saved is restored), so the include file and the store agree on the old
        config. Returns what was done ("" if nothing); `RestorePending` (temporary) when the
        restore failed: the agent is blocked until it succeeds."""
        intent = self.store.open_apply()
        if intent is None or intent.owner_alive():
            return ""
        try:
            self.connector.restore(intent.previous)
        except LiveError as e:
            why = (f"an apply of revision {intent.rev_id} was interrupted and its previous "
                   f"settings could not be restored yet: {e}")
            self.store.set_blocked(why)
            raise RestorePending(why) from None
        note = (f"interrupted: the process applying it (pid {intent.pid}) ended before the apply "
                f"did; the previous settings were restored (by pid {os.getpid()})")
        # a store written before the transition table may have moved the revision on meanwhile
        proposed = self.store.get(intent.rev_id).state is RevisionState.PROPOSED
        self.store.end_apply(intent, state=RevisionState.FAILED if proposed else None,
                             actor="agent:reconcile", note=note)
        # Slurm was reconfigured: said like every action that does so
        self.view.listeners.say(f"revision {intent.rev_id}: {note}")
        self.view.listeners.tell(Activity(ActivityKind.RESTORE, "agent:reconcile", note,
                                          self.store.get(intent.rev_id)))
        return note
