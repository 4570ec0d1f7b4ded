"""`FakeConnector`: a stand-in for a Slurm cluster, for unit tests of the agent's logic and for
the status page's browser test. It is NOT a simulator of Slurm: it holds settings and a job
history, and can be told to fail in the ways a real cluster fails.

Its state is a directory (so several processes - the agent, a CLI command, the service - see the
same fake cluster): ``fake.json`` holds slurm.conf's values (``base``), the live values, the
job history (sacct text) and the faults to inject; ``autosched.conf`` is its include file, read
on "reconfigure" as Slurm would (its values override ``base``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..atomic import write_text_atomic
from ..export.slurm import to_slurm
from ..policies.multifactor import Multifactor
from .backfill import BackfillStats
from .connector import IncludeChange, include_change, include_snapshot, undo_apply
from .errors import ApplyFailed, LiveError, SlurmUnavailable
from .knobs import same_value
from .twin import ClusterSetup

# The fake's slurm.conf: these multifactor settings at the policy's defaults, spelled as Slurm
# spells them (7-0, NO, ...). Taken from the policy's ConfigSpace, so they cannot drift from it.
BASE_SETTINGS = ("PriorityWeightAge", "PriorityMaxAge", "PriorityWeightFairshare",
                 "PriorityDecayHalfLife", "PriorityWeightJobSize", "PriorityFavorSmall",
                 "PriorityCalcPeriod")
DEFAULT_BASE = {name: to_slurm(Multifactor.space[name], Multifactor.space[name].default)
                for name in BASE_SETTINGS}


_STATE_KEYS: dict[str, type | tuple[type, ...]] = {
    "base": dict, "live": dict, "down": bool, "fail_reconfigure": bool, "ignore": list,
    "setup": dict, "sacct": str}


class FakeConnector:
    """A fake cluster kept in `directory` (created with `FakeConnector.create`)."""

    kind = "fake"

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.state_file = self.dir / "fake.json"
        self.include = self.dir / "autosched.conf"
        if not self.state_file.exists():
            raise LiveError(f"{self.state_file}: no fake cluster here")

    @classmethod
    def create(cls, directory: str | Path, base: dict[str, str] | None = None, nodes: int = 4,
               gpus_per_node: int = 8, sacct: str = "",
               setup: ClusterSetup | None = None) -> "FakeConnector":
        """A fake cluster in `directory`: slurm.conf's values `base`, a history `sacct`, and a
        setup (default: `nodes` nodes ``n1``, ``n2``, ... of `gpus_per_node` GPUs in one pool,
        no association tree)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        base = dict(DEFAULT_BASE if base is None else base)
        if setup is None:
            setup = ClusterSetup(tuple((f"n{k + 1}", gpus_per_node) for k in range(nodes)),
                                 source="fake")
        state = {"base": base, "live": dict(base), "down": False, "fail_reconfigure": False,
                 "ignore": [], "apply_delay": 0.0, "setup": setup.to_dict(),
                 "sacct": sacct, "clock": None, "calls": []}
        write_text_atomic(d / "fake.json", json.dumps(state, indent=1))
        return cls(d)

    # -- the fake's state (tests change it to inject faults) --------------------------------
    def state(self) -> dict[str, Any]:
        """``fake.json``, checked: a `LiveError` naming the file when it is not a fake
        cluster's state (not JSON, not an object, a key missing)."""
        try:
            s = json.loads(self.state_file.read_bytes())
        except OSError as e:
            raise LiveError(f"{self.state_file}: cannot read: {e.strerror or e}") from None
        except ValueError as e:  # bad JSON or not UTF-8
            raise LiveError(f"{self.state_file}: not a fake cluster's state: "
                            f"{str(e).splitlines()[0][:120]}") from None
        wrong = [k for k, kind in _STATE_KEYS.items()
                 if not isinstance(s, dict) or not isinstance(s.get(k), kind)]
        if wrong:
            raise LiveError(f"{self.state_file}: not a fake cluster's state: "
                            f"{', '.join(wrong)} missing or of the wrong type (make one with "
                            "FakeConnector.create)")
        return s

    def update(self, **changes: Any) -> None:
        s = self.state()
        s.update(changes)
        write_text_atomic(self.state_file, json.dumps(s, indent=1))

    def hand_edit(self, name: str, value: str) -> None:
        """Someone edits the setting by hand (in the include file, or in slurm.conf when the
        include file does not set it) and reconfigures: the live value changes behind the
        agent."""
        lines = self.include.read_text().splitlines() if self.include.exists() else []
        if any(line.startswith(name + "=") for line in lines):
            lines = [f"{name}={value}" if line.startswith(name + "=") else line for line in lines]
            write_text_atomic(self.include, "\n".join(lines) + "\n")
        else:
            s = self.state()
            s["base"][name] = value
            write_text_atomic(self.state_file, json.dumps(s, indent=1))
        self._reconfigure()

    def _log(self, call: str) -> dict[str, Any]:
        s = self.state()
        s["calls"] = (s.get("calls") or [])[-50:] + [call]
        write_text_atomic(self.state_file, json.dumps(s, indent=1))
        if s["down"]:
            raise SlurmUnavailable(f"`{call}` could not reach Slurm: fake cluster is down")
        return s

    # -- Connector --------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "directory": str(self.dir), "include": str(self.include)}

    def now(self) -> float:
        clock = self.state().get("clock")
        return float(clock) if clock is not None else time.time()

    def sacct_rows(self, since: float, until: float) -> str:
        return self._log("sacct")["sacct"]

    def setup(self) -> ClusterSetup:
        return ClusterSetup.from_dict(self._log("scontrol show partition")["setup"])

    def set_setup(self, setup: ClusterSetup) -> None:
        """The cluster's setup changes (an operator adds an account, changes shares, ...)."""
        self.update(setup=setup.to_dict())

    def live_values(self) -> dict[str, str]:
        return dict(self._log("scontrol show config")["live"])

    def own_settings(self) -> dict[str, str]:
        return dict(self.state()["base"])

    def backfill_stats(self) -> BackfillStats | None:
        """The fake's ``backfill`` record (`BackfillStats.to_dict`; a test sets it), if any."""
        return BackfillStats.from_dict(self._log("sdiag").get("backfill"))

    def check_include_line(self) -> str | None:
        return None  # the fake's include file is always read last

    def refresh(self, settings: dict[str, str], header: str = "") -> list[str]:
        return []  # the fake writes one line per setting: nothing of slurm.conf's to carry

    def snapshot(self) -> dict[str, Any]:
        return include_snapshot(self.include)

    def render(self, settings: dict[str, str], header: str = "") -> str:
        """The include file for `settings`: the header as comments, then one line per setting."""
        text = "".join(f"# {h}\n" for h in header.splitlines() if h)
        return text + "".join(f"{k}={v}\n" for k, v in settings.items())

    def preview(self, settings: dict[str, str], header: str = "") -> IncludeChange:
        return include_change(self.include, self.render(settings, header))

    def apply(self, settings: dict[str, str], header: str = "") -> None:
        before = self.snapshot()
        text = self.render(settings, header)
        try:
            write_text_atomic(self.include, text)
        except OSError as e:
            raise LiveError(f"{self.include}: cannot write: {e.strerror or e}") from None
        delay = self.state().get("apply_delay") or 0.0
        if delay:
            time.sleep(delay)  # a window in which tests kill the agent (-9) mid-apply
        try:
            self._reconfigure()
            live = self.live_values()
            wrong = [f"{k}={live.get(k)} (wanted {v!r})" for k, v in settings.items()
                     if not same_value(k, live.get(k), v)]
            if wrong:
                raise ApplyFailed("after reconfigure, the fake holds " + ", ".join(wrong))
        except LiveError as e:
            raise undo_apply(lambda: self.restore(before), e, self.include) from None

    def restore(self, snapshot: dict[str, Any]) -> None:
        old = snapshot.get("include")
        if old is None:
            self.include.unlink(missing_ok=True)
        else:
            write_text_atomic(self.include, old)
        self._reconfigure(restoring=True)

    def _reconfigure(self, restoring: bool = False) -> None:
        s = self._log("scontrol reconfigure")
        if s["fail_reconfigure"] and not restoring:
            raise LiveError("`scontrol reconfigure` failed (exit 1): fake failure")
        live = dict(s["base"])
        if self.include.exists():
            for line in self.include.read_text().splitlines():
                name, sep, value = line.partition("=")
                if sep and not line.startswith("#") and name not in s["ignore"]:
                    live[name] = value
        s["live"] = live
        write_text_atomic(self.state_file, json.dumps(s, indent=1))
