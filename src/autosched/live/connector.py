"""What the agent needs from a live scheduler: the `Connector` interface.

Slurm (`autosched.live.slurm.SlurmConnector`) is the first implementation; the fake
(`autosched.live.fake.FakeConnector`) stands in for it in unit tests of the agent's logic.

Settings cross this interface as Slurm spells them: a dict from a setting's name (``PriorityMaxAge``,
``bf_window``) to its text (``7-0``, ``1440``; a flag such as ``bf_continue`` is ``""`` when set
and absent when not). Converting to and from the simulator's units is `autosched.live.knobs`'s job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ApplyFailed, LiveError, apply_failed
from .twin import ClusterSetup

if TYPE_CHECKING:
    from .backfill import BackfillStats


@dataclass(frozen=True)
class IncludeChange:
    """The file an apply writes, as it is and as the apply would write it."""

    path: str
    before: str | None  # None: the file does not exist yet
    after: str


class Connector(Protocol):
    """A live scheduler the agent reads and configures.

    Every method may raise `SlurmUnavailable` (the scheduler does not answer) or another
    `LiveError`; none of them may change anything but the settings the agent manages. Whether
    the agent tries again soon is decided by the error's class (`LiveError.temporary`), so an
    error that wraps another keeps that (`errors.apply_failed`).
    """

    kind: str  # "slurm", "fake"

    def describe(self) -> dict[str, Any]:
        """What this connector talks to (paths, cluster name), for `agent status`. Called on
        every status; must not contact the scheduler."""
        ...

    def now(self) -> float:
        """The scheduler's clock (unix seconds). Called at the start of each round."""
        ...

    def sacct_rows(self, since: float, until: float) -> str:
        """``sacct --parsable2`` text (one header line, then job and step rows) of every job that
        was pending, running or ended in [since, until], with at least the columns JobID, Submit,
        Start, End, AllocTRES, ReqTRES, User, Account, Partition, State, Timelimit; times in UTC
        (``YYYY-MM-DDTHH:MM:SS``). Called each round for the new part of the history (the agent
        merges it into its cache) and by ``autosched slurm history``."""
        ...

    def setup(self) -> ClusterSetup:
        """What the agent's twin models of the cluster (`autosched.live.twin`): its GPU nodes,
        partitions (nodes, PriorityTier, TRESBillingWeights), the association tree with its
        shares, PriorityFlags, and notes on what the twin leaves out; its `cluster_spec()` is
        the `ClusterSpec` the tuner simulates. Read each round that tunes, and by ``agent
        twin``."""
        ...

    def live_values(self) -> dict[str, str]:
        """The allowlisted settings as the scheduler holds them now (Slurm: ``scontrol show
        config``; bf_* entries of SchedulerParameters flattened to their own names). Called
        before every round and apply (hand-edit check) and after every apply (verification)."""
        ...

    def own_settings(self) -> dict[str, str]:
        """The allowlisted settings as the cluster's own configuration sets them, without the
        agent's include file (Slurm: slurm.conf and the other files it includes), spelled as
        `live_values`: what the include file shadows. Reads files only; called each round, to
        report a managed setting whose own value Slurm does not run."""
        ...

    def backfill_stats(self) -> BackfillStats | None:
        """What backfill costs the scheduler now (Slurm: ``sdiag``'s backfill statistics); None
        when the cluster does not say. Called each round, after the history is read."""
        ...

    def check_include_line(self) -> str | None:
        """None when the cluster's configuration takes the include file's values (Slurm:
        slurm.conf's last setting line is the ``Include`` of the agent's file), else what is
        wrong and what to do. Reads files only; called by a round that found live values other
        than the running revision's, which a setting after the Include line explains."""
        ...

    def refresh(self, settings: dict[str, str], header: str = "") -> list[str]:
        """Make the include file, written for `settings` (the running ones), carry the
        cluster's own current settings that it shadows but does not manage (Slurm: slurm.conf's
        ``SchedulerParameters`` entries that are not bf_* knobs the agent sets): when Slurm runs
        other ones, write it and reconfigure as `apply` does. Returns what it changed, in words
        (empty: nothing written). Called each round after the hand-edit check."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """What `restore` needs to put back the present managed settings (Slurm: the include
        file's text, or None when it does not exist). Called before an apply; the agent writes
        it to the store as the apply's write-ahead intent."""
        ...

    def preview(self, settings: dict[str, str], header: str = "") -> IncludeChange:
        """What `apply(settings, header)` would write, byte for byte, and what the file holds
        now; writes nothing (Slurm: may read the live SchedulerParameters it merges into).
        Called before an approve, so that an operator confirms the file as it will be written."""
        ...

    def apply(self, settings: dict[str, str], header: str = "") -> None:
        """Make `settings` (every managed setting) live: write them, make the scheduler read them,
        read them back and check each one. On any failure restore the snapshot taken first and
        raise `ApplyFailed` (`ApplyUnreachable` when the scheduler stopped answering: made by
        `errors.apply_failed`). Called by approve, rollback and auto mode, after `snapshot`."""
        ...

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Put back what `snapshot` returned and make the scheduler read it. Called when an apply
        was interrupted (the agent was killed) and is reconciled on the next start."""
        ...


def include_change(include: Path, after: str) -> IncludeChange:
    """`Connector.preview` of a connector that owns one include file: its text now (None when
    it does not exist) and `after`."""
    return IncludeChange(str(include), include_snapshot(include)["include"], after)


def include_snapshot(include: Path) -> dict[str, Any]:
    """What `Connector.snapshot` records of a connector that owns one include file: its text
    (None when it does not exist yet), for `restore` to put back."""
    try:
        return {"include": include.read_text() if include.exists() else None}
    except OSError as e:
        raise LiveError(f"{include}: cannot read: {e.strerror or e}") from None


def undo_apply(restore: Callable[[], None], failed: LiveError, include: Path) -> ApplyFailed:
    """What `Connector.apply` of a connector that owns one include file raises when it failed on
    `failed`: it first puts the previous file back (`restore`), and says whether that worked;
    temporary when either failure was (`errors.apply_failed`)."""
    try:
        restore()
    except LiveError as e:
        return apply_failed(f"{failed}; putting the previous {include} back did not finish: {e}",
                            failed, e)
    return apply_failed(f"{failed}; the previous {include} is restored", failed)
