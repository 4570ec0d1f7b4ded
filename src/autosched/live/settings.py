"""The live agent's settings (``settings.json`` in its state directory): the loop's settings
(`LoopConfig`, shared with `autosched run`, with the live defaults below) plus how the agent
reaches the cluster and how far it may change it.

The file nests the loop's settings under ``"loop"``; a file written before they were nested (one
flat object, with ``margin`` and ``k`` for the guardrail's margin and k) loads as it always did.
Every value is checked when the record is made, so a file edited by hand (``"period": -5``, a
wrong shape) is refused with one line naming the file, as the same value given to ``agent init``
would be.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..adapt.config import DAY, LOOP_FIELDS, MAX_SPAN, LoopConfig
from ..adapt.setting import declared, redefault, setting
from ..adapt.sources import ModelSource, check_time_scale
from ..atomic import read_text_input, write_text_atomic
from ..errors import AutoschedError
from ..space import Float, Int
from .errors import LiveError
from .history import check_seed
from .knobs import LiveSpace, live_space
from .restraint import BRAKE_AFTER

SETTINGS_FILE = "settings.json"
MODES = ("propose", "auto")
MIN_PERIOD = 60.0  # s; Slurm recalculates priorities once a minute at most
MAX_TIMEOUT = 3600.0  # s a Slurm command may take: one that has not answered in an hour will not
MAX_SETTINGS_BYTES = 1 << 20  # settings.json is a few hundred bytes; a larger one is not ours
# A flat settings.json (written before the loop's settings were nested) names two of them so.
LEGACY_NAMES = {"margin": "guard_margin", "k": "guard_k"}
# How a Slurm connector's commands run, unless its spec says otherwise: a command's time limit (s),
# retries of a read, and the wait before the first retry (s), doubled at each.
SLURM_DEFAULTS: dict[str, float] = {"timeout": 30.0, "retries": 2, "backoff": 1.0}
# The keys of each connector kind's spec, with whether each is required.
CONNECTOR_KEYS: dict[str, dict[str, bool]] = {
    "slurm": {"include": True, "slurm_conf": False, "timeout": False, "retries": False, "backoff": False},
    "fake": {"directory": True},
}


@declared
@dataclass(frozen=True, kw_only=True)
class AgentSettings(LoopConfig):
    """What ``agent init`` saves: the loop's settings and the live fields (see the module doc).
    Each is declared once (`adapt.setting`): ``agent init``'s options and the docs' settings
    table are made from the declarations."""

    # -- The live defaults: where the agent's loop differs from `autosched run`'s, on purpose --
    # the policy that models Slurm's priority/multifactor: its knobs are Slurm settings
    policy: str = redefault(LoopConfig, "policy", "multifactor")
    # a round a day: at most one change a day, each judged on the next day's real jobs
    period: float = redefault(LoopConfig, "period", DAY)
    # 20 trials on 3 samples (60 simulations a round, as run's 16 x 4 = 64): set when the agent was
    # written and not measured against run's; kept so that an agent decides as it did.
    budget: int = redefault(LoopConfig, "budget", 20)
    samples: int = redefault(LoopConfig, "samples", 3)
    # k = 2, not 1: on a live cluster a wrong change costs real jobs (run deploys at one standard
    # error, where a wrong change only costs a replayed week; docs/slurm.md).
    guard_k: float = redefault(LoopConfig, "guard_k", 2.0)
    guard_margin: float = redefault(LoopConfig, "guard_margin", 0.02)
    # A live cluster has no boundary schedule to keep: `agent run` starts a round when the workload
    # drifts (a drift round still changes at most once a period).
    drift: bool = redefault(LoopConfig, "drift", True)
    # A live round is called when a burst builds (the contention trigger), and the history's level
    # forecasts the burst away: on the twin's screens of ITP cluster02 and cluster07 (72 windows),
    # 0.4 brought the predicted gain of a change from a median 0.67 and 0.81 of the twin's gain
    # over the period it predicted to 0.97 and 1.02, and changed the config in as many windows
    # (docs/history.md, "samples that follow the last hours").
    persistence: float = redefault(LoopConfig, "persistence", 0.4)

    # -- The live fields -----------------------------------------------------------------------
    # {"kind": "slurm", "include": ..., "slurm_conf": ..., "timeout": ...} | {"kind": "fake", "directory": ...}
    connector: dict[str, Any] = setting(help="how the agent reaches the cluster (`agent init`'s --slurm-conf, "
                                        "--include and --timeout, or --fake)")
    mode: str = setting("propose", "propose (an operator approves each change) or auto (--auto: the agent "
                        "applies a winner within --bound and --max-step)")
    min_jobs: int = setting(50, "finished jobs needed in the history before anything is proposed",
                            "--min-jobs", low=1)
    bounds: dict[str, list[float]] = setting(help="auto mode: each knob's limits, [lo, hi] in the knob's "
                                             "units (--bound KNOB=LO:HI)", factory=dict)
    max_step: float = setting(0.25, "auto mode: largest move of a knob per round, as a fraction of its range "
                              "(1: any move, and the weights are searched as a direction and a scale, as in "
                              "propose mode); in (0, 1]", "--max-step")
    fixed: dict[str, Any] = setting(help="values of the knobs with no live setting (--fix KNOB=VALUE)",
                                    factory=dict)
    seed_history: str | None = setting(None, "an older sacct export that seeds the history (--seed-history)")
    # A judged change whose counterfactual loss is beyond it is rolled back. Its own setting, not
    # the guardrail's margin: that one asks a predicted gain to be worth a change; this one is
    # the noise the judge's replays of a real period are allowed before a change is undone.
    rollback_margin: float = setting(0.02, "the judge rolls back a change that did worse than this fraction "
                                     "in its counterfactual (0.02 = 2%)", "--rollback-margin", low=0)
    max_twin_error: float = setting(0.25, "the judge freezes the agent when its twin missed a judged "
                                    "period's metric by more than this (0.25 = 25%); above 0",
                                    "--max-twin-error")
    notify: str | None = setting(None, "URL to POST a JSON notice to on a proposal, an apply, a rollback, a "
                                 "freeze, an unfreeze, a reject, an adopt, and a new block or tuning failure",
                                 "--notify")
    # N > 1: the cluster replays jobs N times faster than their own time (a test bed); the workload
    # model then fits and samples on the jobs' clock (ModelSource). 1 on a real cluster.
    time_scale: float = setting(1.0, "a test bed that replays jobs N times faster than their own time: N, so "
                                "the workload model fits and samples on the jobs' clock (1 on a real "
                                "cluster)", "--time-scale")
    # What holds the agent back (live/restraint.py).
    cooldown: float | None = setting(None, "a config an operator rejected is not proposed again for this long "
                                     "(e.g. 7d; default: a week)", "--cooldown", duration=True, low=0, unit="s")
    brake: int = setting(BRAKE_AFTER, "auto mode proposes instead of applying after this many judged changes in "
                         "a row whose judged gain was under half the predicted one (0: never)", "--brake", low=0)
    verdict_wait: float | None = setting(None, "how long past a judged period the judge waits for most of its "
                                         "jobs to finish before it records no verdict (e.g. 1d; default: a "
                                         "period)", "--verdict-wait", duration=True, low=0, unit="s")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in MODES:
            raise LiveError(f"mode {self.mode!r}: use propose or auto")
        if self.brake < 0 or any(v is not None and not v >= 0 for v in (self.cooldown, self.verdict_wait)):
            raise LiveError(f"cooldown, brake and verdict wait must be >= 0 (got {self.cooldown}, {self.brake}, "
                            f"{self.verdict_wait})")
        if self.period < MIN_PERIOD:
            raise LiveError(f"period {self.period:g} s: at least {MIN_PERIOD:g} s (Slurm recalculates "
                            "priorities once a minute at most)")
        if not 0 < self.max_step <= 1:
            raise LiveError(f"max step {self.max_step:g}: must be in (0, 1]")
        if not 0 < self.max_twin_error < math.inf:
            raise LiveError(f"max twin error {self.max_twin_error:g}: must be a positive number "
                            "(0.25: the twin may miss a period's metric by 25%)")
        check_connector(self.connector)
        check_time_scale(self.time_scale)
        for name in ("period", "history"):  # the model samples and fits them on the jobs' clock
            if getattr(self, name) * self.time_scale > MAX_SPAN:
                raise LiveError(f"{name} of {getattr(self, name):g} s at time scale {self.time_scale:g} is "
                                f"{getattr(self, name) * self.time_scale / DAY:,.6g} days of the jobs' time, beyond "
                                f"the {MAX_SPAN / DAY:g}-day limit; give the period and history in the test bed's "
                                "seconds")
        check_bounds(live_space(self.policy, self.fixed), self.bounds)  # also: fixed values are valid
        if self.notify is not None:
            from .notify import check_url  # urllib.request: imported when a URL is given

            check_url(self.notify)

    def single_replay(self) -> str:
        """Why auto mode would act on evidence without a spread ("": it would not): the replay
        model gives one workload. ``agent init`` refuses it; a settings file written before says
        so and the agent proposes instead of applying."""
        if self.mode != "auto" or self.model != "replay":
            return ""
        return ("auto mode applies a change only on evidence with a spread; --model replay gives one workload "
                "and none (a single replay of a busy period can swing from +39% to -75%): use a sampling model "
                "(stat, hybrid) in auto mode, or propose mode")

    @property
    def cooldown_seconds(self) -> float:
        """How long a rejected config is not proposed again (`cooldown`, default a week)."""
        return 7 * DAY if self.cooldown is None else self.cooldown

    def model_source(self, factory: Any = None, time_scale: float | None = None) -> ModelSource:
        """The loop's workloads (`LoopConfig.model_source`), the model on the jobs' own clock
        (these settings' `time_scale`, unless another is given)."""
        return super().model_source(factory, self.time_scale if time_scale is None else time_scale)

    # -- the file ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The live fields, and the loop's nested under ``"loop"``."""
        live = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in LOOP_FIELDS}
        return {**live, "loop": self.loop_values()}

    @classmethod
    def from_json(cls, data: Any, where: str) -> AgentSettings:
        """The settings in `data` (nested, or flat as written before the loop's were nested);
        every error names `where`."""
        if not isinstance(data, dict):
            raise LiveError(f"{where}: not the agent's settings (a JSON object expected, got "
                            f"{type(data).__name__})")
        data = dict(data)
        if "loop" in data:
            loop = data.pop("loop")
            if not isinstance(loop, dict):
                raise LiveError(f"{where}: \"loop\" must be an object of the loop's settings")
        else:
            both = [f"{old} and {new}" for old, new in LEGACY_NAMES.items()
                    if old in data and new in data]
            if both:
                raise LiveError(f"{where}: {'; '.join(both)} are two spellings of one setting; "
                                "keep one")
            loop = {LEGACY_NAMES.get(k, k): data.pop(k) for k in list(data) if LEGACY_NAMES.get(k, k) in LOOP_FIELDS}
        if "rollback_margin" not in data and "guard_margin" in loop:
            # written when one margin did both jobs: the agent rolls back as it did
            data["rollback_margin"] = loop["guard_margin"]
        if "persistence" not in loop:
            # written before the samples followed the last hours: the agent samples as it did
            loop["persistence"] = 0.0
        live = {f.name for f in fields(cls)} - set(LOOP_FIELDS)
        unknown = sorted(set(loop) - set(LOOP_FIELDS)) + sorted(set(data) - live)
        if unknown:
            raise LiveError(f"{where}: unknown setting{'s' * (len(unknown) > 1)} {', '.join(unknown)}")
        if "connector" not in data:
            raise LiveError(f"{where}: no connector (how the agent reaches the cluster)")
        try:
            return cls(**loop, **data)
        except AutoschedError as e:
            raise LiveError(f"{where}: {e}") from None

    def save(self, state_dir: Path) -> None:
        """Write ``settings.json``; readable by its owner only when it holds a webhook URL
        (whose path is often its secret), as ``service.token`` is."""
        write_text_atomic(Path(state_dir) / SETTINGS_FILE, json.dumps(self.to_json(), indent=1),
                          mode=0o600 if self.notify else None)

    @classmethod
    def load(cls, state_dir: Path) -> AgentSettings:
        p = Path(state_dir) / SETTINGS_FILE
        if not p.exists() and not p.is_symlink():
            raise LiveError(f"{p}: no agent here (initialise the state directory first)")
        text = read_text_input(p, "JSON file of the agent's settings", MAX_SETTINGS_BYTES)
        try:
            data = json.loads(text)
        except ValueError as e:
            raise LiveError(f"{p}: cannot read the agent's settings: {e}") from None
        return cls.from_json(data, str(p))


def check_connector(spec: Any) -> None:
    """A connector spec as `make_connector` takes it: its kind, its keys, their types and bounds."""
    if not isinstance(spec, dict) or spec.get("kind") not in CONNECTOR_KEYS:
        kind = spec.get("kind") if isinstance(spec, dict) else spec
        raise LiveError(f"connector {kind!r}: use slurm or fake")
    keys = CONNECTOR_KEYS[spec["kind"]]
    unknown = sorted(set(spec) - set(keys) - {"kind"})
    missing = sorted(k for k, required in keys.items() if required and spec.get(k) is None)
    if unknown or missing:
        raise LiveError(f"{spec['kind']} connector: " + "; ".join(
            ([f"unknown {', '.join(unknown)}"] if unknown else []) + ([f"no {', '.join(missing)}"] if missing else [])))
    for k in ("include", "slurm_conf", "directory"):
        if spec.get(k) is not None and not isinstance(spec[k], str):
            raise LiveError(f"{spec['kind']} connector: {k} {spec[k]!r} must be a path")
    timeout, retries, backoff = ({**SLURM_DEFAULTS, **spec}[k] for k in ("timeout", "retries", "backoff"))
    if not (_number(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise LiveError(f"timeout {timeout!r}: a Slurm command's time limit must be a number of seconds in "
                        f"(0, {MAX_TIMEOUT:g}]")
    if not (isinstance(retries, int) and not isinstance(retries, bool) and 0 <= retries <= 10):
        raise LiveError(f"retries {retries!r}: must be an integer in [0, 10]")
    if not (_number(backoff) and 0 <= backoff <= MAX_TIMEOUT):
        raise LiveError(f"backoff {backoff!r}: must be a number of seconds in [0, {MAX_TIMEOUT:g}]")


def check_bounds(space: LiveSpace, bounds: dict[str, Any]) -> None:
    """Auto mode's bounds: each names a managed numeric knob, and is [lo, hi] with finite
    lo <= hi inside the knob's own range (in its units)."""
    numeric = {k.name: k for k in space.managed if isinstance(k, (Int, Float))}
    for name, b in bounds.items():
        knob = numeric.get(name)
        if knob is None:
            raise LiveError(f"bound on {name}: not a managed numeric knob of {space.policy} (they are "
                            f"{', '.join(numeric)})")
        if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(_number(v) for v in b)):
            raise LiveError(f"bound on {name} {b!r}: must be two finite numbers, [lo, hi]")
        lo, hi = b
        if lo > hi:
            raise LiveError(f"bound on {name} [{lo:g}, {hi:g}]: lo is above hi")
        if lo < knob.low or hi > knob.high:
            raise LiveError(f"bound on {name} [{lo:g}, {hi:g}]: outside the knob's range "
                            f"[{knob.low:g}, {knob.high:g}]{f' ({knob.unit})' if knob.unit else ''}")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_setup(settings: AgentSettings) -> None:
    """What ``agent init`` checks outside the settings before it writes anything (reads only):
    the seed history is a regular file of sacct text (`check_seed`), and a Slurm connector's slurm.conf includes the agent's
    file as its last setting line (without it nothing the agent writes takes effect, and a
    setting after it would override the agent's)."""
    if settings.seed_history is not None:
        check_seed(settings.seed_history)
    spec = settings.connector
    if spec["kind"] == "slurm":
        from .slurm import include_problem

        problem = include_problem(Path(spec["slurm_conf"]) if spec.get("slurm_conf") else None,
                                  Path(spec["include"]))
        if problem:
            raise LiveError(problem)


def prepare_cluster(settings: AgentSettings) -> None:
    """Create a Slurm connector's include file when it does not exist yet (a comment only: Slurm
    warns on every command about an Include of a missing file)."""
    spec = settings.connector
    if spec["kind"] != "slurm":
        return
    inc = Path(spec["include"])
    if not inc.exists():
        try:
            write_text_atomic(inc, "# Managed by autosched: no managed settings yet.\n")
        except OSError as e:
            raise LiveError(f"{inc}: cannot create the include file: {e.strerror or e}") from None
