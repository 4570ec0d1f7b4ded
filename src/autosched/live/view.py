"""The agent's view of its cluster and its store: every read a round, an action or the loop
makes of Slurm (live settings, slurm.conf's own entries, the setup, the history) and of the
store (the running revision, the setup a round recorded), and how a config is spelt in Slurm.

A read raises what the connector raised; `Observer.observe` turns a failed read into a block in
one place (`live.failures`). Two reads write: the first round records the live config as the
baseline (`running_or_baseline`), and a reading of the live settings is recorded
(`record_reading`), which ends a block that said Slurm did not answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .activity import Listeners
from .approval import apply_header, include_writer
from .connector import Connector
from .errors import ActionNotAllowed, LiveError
from .history import LiveJobs, SeedHistory, observation, update_history
from .knobs import LiveSpace, same_value
from .records import SETUP_KEY, LiveOverride, Revision, RevisionKind, StoredRound
from .round import Action
from .settings import AgentSettings
from .store import RevisionStore
from .twin import ClusterSetup, twin_jobs, twin_view


class ClusterView:
    """Reads of one agent's cluster and store (see the module doc)."""

    def __init__(self, state_dir: Path, settings: AgentSettings, store: RevisionStore,
                 connector: Connector, space: LiveSpace, listeners: Listeners):
        self.state_dir, self.settings, self.store = state_dir, settings, store
        self.connector, self.space, self.listeners = connector, space, listeners
        self.seed = SeedHistory(settings.seed_history) if settings.seed_history else None
        self._slurm: dict[str, dict[str, str] | None] = {}  # config (JSON) -> its Slurm spelling

    def slurm_texts(self, config: Mapping[str, Any]) -> dict[str, str] | None:
        """Each managed knob of `config` as Slurm spells it (what `scontrol show config` shows),
        so that operators read 7-0, not 604800.0; None when this agent's knobs cannot translate
        `config` (a knob it does not know, a value out of range). Remembered per config: a
        revision's config never changes, and translating one validates the whole policy config."""
        key = json.dumps(config, sort_keys=True, default=str)
        if key not in self._slurm:
            try:
                self._slurm[key] = self.space.knob_texts(self.space.full(config))
            except (KeyError, ValueError):
                self._slurm[key] = None
            if len(self._slurm) > 512:
                self._slurm.pop(next(iter(self._slurm)))
        return self._slurm[key]

    def settings_of(self, config: Mapping[str, Any]) -> dict[str, str]:
        """`config` as the managed settings an apply writes (Slurm's names and spelling)."""
        return self.space.to_settings(self.space.full(config))

    # -- Slurm's live settings ---------------------------------------------------------------
    def live_values(self) -> dict[str, str]:
        """Slurm's managed settings now; each reading is recorded (`record_reading`)."""
        live = self.connector.live_values()
        try:
            knobs = self.space.knob_texts(self.space.full(self.space.from_settings(live)))
        except (LiveError, KeyError, ValueError):
            knobs = None  # a value the agent cannot read: the hand-edit check says which
        if knobs is not None:
            self.record_reading(knobs)
        return live

    def record_reading(self, knobs: Mapping[str, str]) -> None:
        """Record what Slurm runs (what the status shows as "in Slurm", and when); Slurm
        answered, so a block the newest round left for a temporary cause is over."""
        self.store.record_reading(knobs)
        rec = self.store.last_round()
        if rec is not None:
            # the newest round was blocked by something temporary (Slurm did not answer, an
            # apply could not be restored yet): Slurm answers now, so that block is over
            if rec.action == Action.BLOCKED.value and rec.retry_after is not None \
                    and self.store.flags().blocked == rec.why and self.store.open_apply() is None:
                self.store.set_blocked("")

    def live_config(self) -> dict[str, Any]:
        return self.space.from_settings(self.live_values())

    def running_or_baseline(self) -> Revision:
        """The running revision; in the first round, the live config recorded as the baseline."""
        run = self.store.running()
        if run is not None:
            return run
        if self.store.history(1):
            raise ActionNotAllowed("no revision is known to be running (the last one was rolled "
                                   "back or failed without a replacement); adopt the live config")
        try:
            return self.store.create(self.live_config(), kind=RevisionKind.BASELINE,
                                     trigger="baseline", actor="agent", note="the config found live")
        except ActionNotAllowed:
            if (run := self.store.running()) is not None:
                return run  # another process recorded the baseline at the same moment
            raise

    def live_overrides(self, running: Revision,
                       live: Mapping[str, str] | None = None) -> tuple[LiveOverride, ...]:
        """The live settings (read now unless `live` is given) that are not the running
        revision's: each with its live and its expected text (none: no hand edit)."""
        live = dict(live if live is not None else self.live_values())
        want = self.settings_of(running.config)
        return tuple(LiveOverride(k, self.space.effective(k, live), v) for k, v in want.items()
                     if not same_value(k, self.space.effective(k, live), v))

    def hand_edits(self, running: Revision, live: Mapping[str, str] | None = None) -> str:
        """"" if the live settings are the running revision's, else which differ (and, when the
        include file was last written by another agent's store, that it was)."""
        said = overrides_text(running, self.live_overrides(running, live), self.space)
        if said and (problem := self.connector.check_include_line()) is not None:
            # not an edit of the include file: a setting slurm.conf sets after its Include line
            return f"{said}: {problem}"
        writer = include_writer(self.connector.snapshot().get("include")) if said else None
        if writer is not None and writer != str(self.store.path):
            said += (f"; the include file was last written by the agent whose store is {writer}, "
                     "not this one: two agents share it (give each its own include file)")
        return said

    # -- slurm.conf and the include file -----------------------------------------------------
    def refresh_include(self, running: Revision) -> list[str]:
        """Have the include file carry slurm.conf's own current entries that it shadows but the
        agent does not manage (`Connector.refresh`), rewritten for the running revision's
        settings; returns what changed. Nothing while another process applies."""
        if self.store.open_apply() is not None:
            return []  # that apply writes the file (merged) itself, or the next round does
        return self.connector.refresh(self.settings_of(running.config),
                                      header=apply_header(running, self.store.path))

    def shadowed(self, running: Revision) -> tuple[str, ...]:
        """Each managed setting that the cluster's own configuration (slurm.conf) sets to another
        value than the running revision's, which the include file shadows, and that slurm.conf
        no longer sets as it did when the agent began (its first revision): an edit there since,
        which does not take effect. (A value slurm.conf kept while the agent changed the setting
        is every applied change's, not news.)"""
        own = {k.lower(): v for k, v in self.connector.own_settings().items()}
        want = self.settings_of(running.config)
        first = self._first_settings()
        return tuple(f"{k}={own[k.lower()]} in slurm.conf does not take effect: the agent's "
                     f"include file sets {k}={v} (revision {running.id}); change it through the "
                     "agent" for k, v in want.items()
                     if k.lower() in own and not same_value(k, own[k.lower()], v)
                     and not (k in first and same_value(k, own[k.lower()], first[k])))

    def _first_settings(self) -> dict[str, str]:
        """The managed settings as the agent found them live (the store's first revision), in
        Slurm's spelling; {} when it cannot tell."""
        try:
            return self.settings_of(self.store.get(1).config)
        except (LiveError, KeyError, ValueError):
            return {}

    # -- the history and the cluster's setup -------------------------------------------------
    def jobs(self, now: float) -> LiveJobs:
        """The history (cache updated with what sacct has since the last round, incrementally),
        plus the seed file's jobs the cluster no longer reports."""
        return update_history(self.state_dir, self.connector.sacct_rows, now,
                              self.settings.history, self.seed)

    def recorded_setup(self) -> ClusterSetup | None:
        """The cluster's setup as the newest round that read it recorded it (None: none did, or
        its record is not one; said in the log)."""
        read = self.store.last_round_with(SETUP_KEY)
        return None if read is None else self.setup_of(read)

    def setup_of(self, read: StoredRound) -> ClusterSetup | None:
        """The setup round `read` recorded (None: none, or not a setup; said in the log)."""
        if read.setup_error:
            self.listeners.say(f"{self.store.path}: a round's recorded setup: {read.setup_error}; "
                               "not used")
        return read.setup

    def twin_space(self, setup: ClusterSetup) -> LiveSpace:
        """The policy's knobs as the twin of the cluster `setup` describes simulates them
        (`twin.twin_space`, with the settings' fixed values)."""
        from .twin import twin_space

        return twin_space(self.settings.policy, self.settings.fixed, setup)


def overrides_text(running: Revision, overrides: tuple[LiveOverride, ...],
                   space: LiveSpace | None = None) -> str:
    """Which live settings differ from `running`'s, in words ("" for none). With the agent's
    `space`, a setting with a unit says both values in it too: ``scontrol show config`` and
    slurm.conf spell times differently ("PriorityCalcPeriod is 00:05:00 (5 min) live, 1 (1
    min) in revision 5")."""
    return "; ".join(f"{o.setting} is {o.live}{_in_unit(space, o.setting, o.live)} live, "
                     f"{o.expected}{_in_unit(space, o.setting, o.expected)} in revision "
                     f"{running.id}" for o in overrides)


def _in_unit(space: LiveSpace | None, setting: str, text: str | None) -> str:
    """" (5 min)": `text` as its knob's value in the knob's unit ("" when it has none)."""
    from ..export.slurm import from_slurm
    from ..space import ConfigError

    knob = next((k for k in space.managed if k.name == setting), None) if space else None
    if knob is None or not getattr(knob, "unit", "") or text is None:
        return ""
    try:
        v = float(from_slurm(knob, text))
    except (ConfigError, ValueError, TypeError):
        return ""
    return f" ({v:,.0f} {knob.unit})" if v.is_integer() else f" ({v:g} {knob.unit})"


def observe_twin(connector: Connector, state_dir: Path, window: float,
                 seed_history: str | None = None) -> tuple[ClusterSetup, dict[str, Any]]:
    """The twin as a round would see it now, without writing anything: the connector's setup
    and `twin_view` of the history window (the cache in `state_dir` plus what sacct has since,
    and the seed file), with a warning for each reason jobs were left out (`twin_jobs`)."""
    setup = connector.setup()
    now = connector.now()
    seed = SeedHistory(seed_history) if seed_history else None
    jobs = update_history(state_dir, connector.sacct_rows, now, window, seed, save=False)
    kept, dropped = twin_jobs(jobs, setup)
    obs, _ = observation(kept, now, window)
    view = twin_view(setup, obs.history)
    view["warnings"] += [f"{n} job(s) of the history left out of the twin: {why}"
                         for why, n in dropped.items()]
    if jobs.malformed:
        view["warnings"].append(f"{jobs.malformed} malformed sacct row(s) skipped")
    return setup, view
