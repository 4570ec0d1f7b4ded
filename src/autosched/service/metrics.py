"""``GET /metrics``: the agent's state in Prometheus' text exposition format (version 0.0.4).

Made from the same `AgentStatus` the API and the page show, plus the store's count of rounds by
what they did, so a dashboard and an alert read what an operator reads. A gauge whose value is not
known (no pending proposal, no round yet, no twin error recorded) is left out rather than given a
stand-in value: Prometheus then has no sample, and ``absent(...)`` says so.

| metric | type | what |
|---|---|---|
| ``autosched_info{policy,mode,connector}`` | gauge | 1; the agent's settings as labels (absent when the agent cannot be opened) |
| ``autosched_running_revision`` | gauge | id of the running revision |
| ``autosched_running_applied_timestamp_seconds`` | gauge | when it went live (unix s) |
| ``autosched_running_knob_value{knob}`` | gauge | each numeric knob of the running config (a flag: 0 or 1), in the simulator's units |
| ``autosched_pending_revision`` | gauge | id of the proposal awaiting approval |
| ``autosched_pending_predicted_gain`` | gauge | its predicted gain (relative: 0.05 = 5% better) |
| ``autosched_pending_predicted_gain_spread`` | gauge | the standard error of that gain |
| ``autosched_revisions`` | gauge | the newest revision's id |
| ``autosched_rounds_total{action}`` | counter | rounds recorded, by what they did (every action, 0 included) |
| ``autosched_frozen`` | gauge | 1 while frozen |
| ``autosched_blocked`` | gauge | 1 while blocked (hand edit, Slurm down, too little history, ...) |
| ``autosched_interrupted_apply`` | gauge | 1 while an interrupted apply awaits reconciliation |
| ``autosched_last_round_timestamp_seconds`` | gauge | when the last round ran |
| ``autosched_next_round_timestamp_seconds`` | gauge | when the next is due |
| ``autosched_twin_error{revision}`` | gauge | the twin's relative error over the newest judged period, the mean over the judge's replays under the new config (absent when the judge could not measure it) |
| ``autosched_counterfactual_gain{revision}`` | gauge | that revision's gain in the twin over the same period, against the config before it, the mean over the judge's replays (relative: 0.05 = 5% better) |
| ``autosched_prediction_error{revision}`` | gauge | that revision's predicted gain minus its counterfactual gain (how far the prediction overshot) |
| ``autosched_loop_alive`` | gauge | 1 while an `agent run` is alive on the store (0: none, or gone silent) |
| ``autosched_heartbeat_timestamp_seconds`` | gauge | when `agent run` last beat |
| ``autosched_slurm_read_timestamp_seconds`` | gauge | when Slurm's settings were last read |
| ``autosched_last_round_duration_seconds`` | gauge | how long the last round took |
| ``autosched_pending_imputed_share`` | gauge | share of the pending proposal's history jobs whose durations were imputed (unfinished) |
| ``autosched_backfill_last_cycle_seconds`` | gauge | how long slurmctld's last backfill cycle took, as the newest round read ``sdiag`` |

Every sample carries the label ``state_dir``: the agent it is of (a service moved to another
state directory starts other series).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..live.round import Action
from ..live.status import AgentStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = Mapping[str, str]


def escape_label(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(v: float) -> str:
    """A sample value as the text format writes it (``+Inf``, ``NaN``, else Python's repr)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    f = float(v)
    return str(int(f)) if f.is_integer() and abs(f) < 1e15 else repr(f)


class Exposition:
    """The families of one scrape, each written once with its HELP and TYPE lines; `base`
    labels go on every sample."""

    def __init__(self, base: Labels | None = None) -> None:
        self.lines: list[str] = []
        self.base = dict(base or {})

    def family(self, name: str, kind: str, help_text: str,
               samples: Iterable[tuple[Labels, float]]) -> None:
        """Family `name`; nothing at all when it has no sample (an unknown value is absent)."""
        rows = [(labels, v) for labels, v in samples]
        if not rows:
            return
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, v in rows:
            lab = ",".join(f'{k}="{escape_label(str(val))}"'
                           for k, val in {**self.base, **labels}.items())
            self.lines.append(f"{name}{{{lab}}} {number(v)}" if lab else f"{name} {number(v)}")

    def gauge(self, name: str, help_text: str, value: float | None) -> None:
        self.family(name, "gauge", help_text, [] if value is None else [({}, value)])

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _knob(v: object) -> float | None:
    """A knob value as a sample: numbers and flags; None for anything else (a category)."""
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def render(status: AgentStatus, rounds: Mapping[str, int], state_dir: str = "") -> str:
    """The exposition for `status` and the store's `rounds` by action (`store.round_counts`),
    each sample labelled with `state_dir`."""
    out = Exposition({"state_dir": state_dir} if state_dir else None)
    if status.mode is not None:
        out.family("autosched_info", "gauge", "The agent's settings, as labels (value 1).",
                   [({"policy": status.policy or "", "mode": status.mode,
                      "connector": str((status.connector or {}).get("kind", ""))}, 1.0)])
    run, pending = status.running, status.pending
    out.gauge("autosched_running_revision", "Id of the running revision.",
              run.id if run else None)
    out.gauge("autosched_running_applied_timestamp_seconds",
              "When the running revision went live (unix seconds).",
              run.applied_at if run else None)
    knobs = [] if run is None else [({"knob": k}, x) for k, v in sorted(run.config.items())
                                    if (x := _knob(v)) is not None]
    out.family("autosched_running_knob_value", "gauge",
               "Each numeric knob of the running config in the simulator's units (a flag: 0 or 1).",
               knobs)
    out.gauge("autosched_pending_revision", "Id of the proposal awaiting approval.",
              pending.id if pending else None)
    ev = pending.evidence if pending else None
    out.gauge("autosched_pending_predicted_gain",
              "Predicted gain of the pending proposal (relative: 0.05 = 5% better).",
              ev.predicted_gain if ev else None)
    out.gauge("autosched_pending_predicted_gain_spread",
              "Standard error of the pending proposal's predicted gain.", ev.spread if ev else None)
    out.gauge("autosched_revisions", "The newest revision's id (0: none yet).", status.revisions)
    counts = {a.value: 0 for a in Action}
    for action, n in rounds.items():
        counts[action or "unknown"] = counts.get(action or "unknown", 0) + n
    out.family("autosched_rounds_total", "counter", "Rounds recorded, by what they did.",
               [({"action": a}, n) for a, n in sorted(counts.items())])
    out.gauge("autosched_frozen", "1 while the agent is frozen.", float(status.frozen))
    out.gauge("autosched_blocked", "1 while the agent is blocked (the status says why).",
              float(bool(status.blocked)))
    out.gauge("autosched_interrupted_apply", "1 while an interrupted apply awaits reconciliation.",
              float(status.interrupted_apply is not None))
    last = status.last_round
    out.gauge("autosched_last_round_timestamp_seconds", "When the last round ran (unix seconds).",
              last.time if last else None)
    out.gauge("autosched_next_round_timestamp_seconds", "When the next round is due (unix seconds).",
              status.next_round)
    beat = status.heartbeat
    out.gauge("autosched_loop_alive", "1 while an `agent run` is alive on the store.",
              None if beat is None else float(status.loop_alive))
    out.gauge("autosched_heartbeat_timestamp_seconds", "When `agent run` last beat (unix s).",
              beat.time if beat else None)
    out.gauge("autosched_slurm_read_timestamp_seconds",
              "When Slurm's managed settings were last read (unix seconds).",
              status.live.time if status.live else None)
    out.gauge("autosched_last_round_duration_seconds", "How long the last round took.",
              last.seconds if last else None)
    out.gauge("autosched_pending_imputed_share",
              "Share of the pending proposal's history jobs whose durations were imputed.",
              ev.imputed_durations / ev.history_jobs if ev and ev.history_jobs and
              ev.imputed_durations is not None else None)
    bf = status.backfill
    out.gauge("autosched_backfill_last_cycle_seconds",
              "How long slurmctld's last backfill cycle took (sdiag, as the newest round read it).",
              bf.last_cycle if bf else None)
    judged = status.judged
    miss = None if judged is None or judged.predicted_gain is None or \
        judged.counterfactual_gain is None else judged.predicted_gain - judged.counterfactual_gain
    for name, value, what in (
            ("autosched_twin_error", judged.twin_error if judged else None,
             "Relative error of the agent's twin against the cluster over the newest judged "
             "period (absent when the judge could not measure it)."),
            ("autosched_counterfactual_gain", judged.counterfactual_gain if judged else None,
             "Gain of the newest judged revision in the twin over that period, against the "
             "config before it (relative: 0.05 = 5% better)."),
            ("autosched_prediction_error", miss,
             "The newest judged revision's predicted gain minus its counterfactual gain.")):
        out.family(name, "gauge", what,
                   [] if judged is None or value is None else [({"revision": str(judged.revision)}, value)])
    return out.text()
