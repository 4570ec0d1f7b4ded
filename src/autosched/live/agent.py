"""The agent: the adaptive `Controller` run on a live cluster's history, with every change of the
cluster's configuration a revision in the store.

`Agent` is the facade the CLI and the HTTP service call; the work is done by small objects, each
with one job, which it builds and wires (docs/architecture.md draws them):

- `ClusterView` (live/view.py): every read of Slurm and of the store;
- `Applier` (live/applying.py): the write-ahead apply and `reconcile`;
- `OperatorActions` (live/actions.py): approve, reject, rollback, adopt, freeze, unfreeze, preview;
- `Observer` (live/observe.py): a round's reads, a failed one made a block (live/failures.py);
- `Tuning` (live/tuning.py): the Controller, its memory in the store, drift;
- `RoundStep` (live/step.py): a round, observe -> decide (live/round.py, pure) -> act;
- `Loop` (live/loop.py): ``agent run``'s rounds, heartbeats, drift polls; `Stopping` its stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .actions import OperatorActions
from .activity import ActivitySink, Listeners
from .applying import Applier
from .approval import IncludePreview
from .connector import Connector
from .errors import LiveError
from .knobs import LiveSpace, live_space
from .loop import Clock, Loop, Sleep, loop_holder
from .observe import Observer
from .records import Flags, Revision
from .round import RoundOutcome, RoundRules
from .settings import SLURM_DEFAULTS, AgentSettings, check_setup, prepare_cluster
from .status import AgentStatus, read_status
from .step import RoundStep
from .stopping import Stopping
from .store import RevisionStore
from .tuning import Tuning
from .twin import ClusterSetup
from .view import ClusterView

if TYPE_CHECKING:
    from ..adapt.controller import ControllerMemory


def make_connector(spec: Mapping[str, Any]) -> Connector:
    if spec.get("kind") == "slurm":
        from .slurm import SlurmConnector, SlurmRunner

        run = {**SLURM_DEFAULTS, **spec}
        runner = SlurmRunner(spec.get("slurm_conf"), timeout=float(run["timeout"]),
                             retries=int(run["retries"]), backoff=float(run["backoff"]))
        return SlurmConnector(spec["include"], spec.get("slurm_conf"), runner)
    if spec.get("kind") == "fake":
        from .fake import FakeConnector

        return FakeConnector(spec["directory"])
    raise LiveError(f"connector {spec.get('kind')!r}: use slurm or fake")


class Agent:
    """The live loop's actions on one cluster, for the CLI and the service (see the module doc).
    Its parts are attributes, for a caller (or a test) that needs one: `view`, `applier`,
    `actions`, `observer`, `tuning`, `rounds`, `loop`, `stopping`, `listeners`."""

    def __init__(self, state_dir: Path | str, settings: AgentSettings,
                 connector: Connector | None = None):
        self.state_dir = Path(state_dir)
        self.settings = settings
        self.store = RevisionStore(self.state_dir)
        self.connector = connector if connector is not None else make_connector(settings.connector)
        self.space: LiveSpace = live_space(settings.policy, settings.fixed)
        self.listeners = Listeners()
        self.stopping = Stopping()
        self.view = ClusterView(self.state_dir, settings, self.store, self.connector, self.space,
                                self.listeners)
        self.applier = Applier(self.store, self.connector, self.view)
        self.actions = OperatorActions(self.view, self.applier, self.listeners)
        self.observer = Observer(self.view, self.applier, self.stopping, self.rules)
        self.tuning = Tuning(self.view, self.listeners)
        self.rounds = RoundStep(self.observer, self.actions, self.applier, self.tuning,
                                self.stopping, self.listeners, self.rules)
        self.loop = Loop(self.rounds, self.stopping, self.listeners)
        if settings.notify:
            from .notify import Webhook

            self.sinks.append(Webhook(settings.notify, str(self.state_dir), lambda m: self.log(m)))

    @property
    def log(self) -> Callable[[str], None]:
        """Where the agent's free-text messages go (set by ``agent run`` and the service)."""
        return self.listeners.log

    @log.setter
    def log(self, log: Callable[[str], None]) -> None:
        self.listeners.log = log

    @property
    def sinks(self) -> list[ActivitySink]:
        """Told every round and action (live/activity.py)."""
        return self.listeners.sinks

    def rules(self) -> RoundRules:
        """The settings a round's rules read."""
        s = self.settings
        return RoundRules(period=s.period, history=s.history, min_jobs=s.min_jobs, metric=s.metric,
                          rollback_margin=s.rollback_margin, max_twin_error=s.max_twin_error,
                          verdict_wait=s.verdict_wait, noise_k=s.guard_k)

    # -- reading ------------------------------------------------------------------------------
    def status(self, history: int = 10, now: float | None = None) -> AgentStatus:
        """The agent at a glance (`read_status`): read from the store only, never from Slurm."""
        s = self.settings
        return read_status(self.store, history=history, mode="auto" if s.mode == "auto" else "propose",
                           policy=s.policy, period=s.period, connector=self.connector.describe(),
                           slurm=self.slurm_texts, now=now,
                           bounds={k: list(v) for k, v in s.bounds.items()},
                           max_step=s.max_step if s.mode == "auto" else None)

    def slurm_texts(self, config: Mapping[str, Any]) -> dict[str, str] | None:
        return self.view.slurm_texts(config)

    def memory(self, setup: ClusterSetup | None = None) -> ControllerMemory | None:
        return self.tuning.memory(setup)

    def drifted(self, now: float | None = None) -> str:
        return self.tuning.drifted(now)

    # -- operator actions (live/actions.py) -------------------------------------------------
    def preview(self, rev_id: int) -> IncludePreview:
        return self.actions.preview(rev_id)

    def approve(self, rev_id: int, actor: str, confirmed_diff: str | None = None,
                force: bool = False) -> Revision:
        return self.actions.approve(rev_id, actor, confirmed_diff, force)

    def reject(self, rev_id: int, actor: str, reason: str = "") -> Revision:
        return self.actions.reject(rev_id, actor, reason)

    def rollback(self, rev_id: int | None, actor: str, note: str = "",
                 force: bool = False) -> Revision:
        return self.actions.rollback(rev_id, actor, note, force)

    def freeze(self, actor: str, reason: str = "") -> Flags:
        return self.actions.freeze(actor, reason)

    def unfreeze(self, actor: str) -> Flags:
        return self.actions.unfreeze(actor)

    def adopt(self, actor: str, note: str = "") -> Revision:
        return self.actions.adopt(actor, note)

    def reconcile(self) -> str:
        return self.applier.reconcile()

    # -- rounds -------------------------------------------------------------------------------
    def step(self, trigger: str = "period", now: float | None = None) -> RoundOutcome:
        return self.rounds.step(trigger, now)

    def run(self, rounds: int | None = None, poll: float | None = None,
            should_stop: Callable[[], bool] = lambda: False, sleep: Sleep = time.sleep,
            clock: Clock = time.monotonic) -> list[RoundOutcome]:
        return self.loop.run(rounds, poll, should_stop, sleep, clock)

    def request_stop(self) -> None:
        self.stopping.request()

    @property
    def stop_requested(self) -> bool:
        return self.stopping.requested


def init_agent(state_dir: Path | str, settings: AgentSettings,
               connector: Connector | None = None) -> Agent:
    """Create (or re-configure) an agent in `state_dir`. Everything is checked before anything is
    written (the settings when they were made; here the connector and the cluster's setup,
    `check_setup`), and ``settings.json``, which makes the directory an agent's, is written last,
    atomically: a refused init leaves no agent behind, and a re-initialised one its old settings."""
    state_dir = Path(state_dir)
    if (holder := loop_holder(state_dir)) is not None:
        # the loop read its settings at its start: a new init would change what the status and
        # the page say, not what the loop does
        raise LiveError(f"{state_dir}: `agent run` ({holder}) runs on this state directory with "
                        "the settings it read at its start; stop it, init, then start it again")
    connector = connector if connector is not None else make_connector(settings.connector)
    check_setup(settings)
    prepare_cluster(settings)
    if state_dir.exists() and not state_dir.is_dir():
        raise LiveError(f"{state_dir}: is a file, not a directory; an agent's state is a "
                        "directory")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LiveError(f"{state_dir}: cannot write the agent's settings: {e.strerror or e}") from None
    agent = Agent(state_dir, settings, connector)
    try:
        settings.save(state_dir)
    except OSError as e:
        raise LiveError(f"{state_dir}: cannot write the agent's settings: {e.strerror or e}") from None
    return agent


def read_only(state_dir: Path | str) -> tuple[AgentSettings, Connector]:
    """The settings saved in `state_dir` and a connector to the cluster they name, for a command
    that only reads (``agent twin``): no store is opened, nothing is reconciled or written."""
    settings = AgentSettings.load(Path(state_dir))
    return settings, make_connector(settings.connector)


def open_agent(state_dir: Path | str, connector: Connector | None = None) -> Agent:
    """The agent saved in `state_dir` by init (connector, policy, period, mode). Opening only
    reads: an apply a killed process left open is reconciled by `start_agent` (``agent run``,
    ``agent serve``), by each round and by each action, never by a read such as a status."""
    return Agent(state_dir, AgentSettings.load(Path(state_dir)), connector)


def start_agent(state_dir: Path | str, connector: Connector | None = None,
                log: Callable[[str], None] | None = None) -> Agent:
    """`open_agent` for a process that acts (``agent run``, ``agent serve``): it first finishes
    what a killed process left (`Agent.reconcile`); when that fails (Slurm does not answer),
    the block says so, and each round and action tries again."""
    agent = open_agent(state_dir, connector)
    if log is not None:
        agent.log = log
    try:
        agent.reconcile()
    except LiveError as e:
        agent.log(str(e))
    return agent

