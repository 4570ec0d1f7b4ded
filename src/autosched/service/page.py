"""The status page at ``/``: server-rendered HTML, one inline stylesheet, one inline SVG plot and
a small inline script for the action buttons. Nothing is loaded from elsewhere, so the page
works on a cluster without internet access.

The script only adds what HTML cannot do: it sends the bearer token (asked for once, kept in the
tab's sessionStorage) with each action, and reloads the page when the store changed (it polls
``/api/status`` and compares its ``version``). Approving takes two clicks: the first fetches the
include file's diff exactly as the apply will write it (``/api/revisions/{id}/preview``) and
asks for the operator's name; the second sends both with the approve, and the store records them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from html import escape
from typing import Any

from ..live.backfill import BackfillStats
from ..live.records import JudgedOutcome, Revision, RevisionState, RoundRecord
from ..live.status import AgentStatus, Judgement, TwinStatus
from .views import OutcomeRow

HISTORY_ROWS = 200  # the page shows this many newest revisions; the API has them all
POLL_S = 10


def _t(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts)) if ts else "-"


def _v(v: Any) -> str:
    return "(unset)" if v is None else escape(json.dumps(v) if not isinstance(v, str) else v)


def _pct(x: float | None, sign: bool = True) -> str:
    return "-" if x is None else f"{x:+.1%}" if sign else f"{x:.1%}"


def _gain(judged: Judgement | JudgedOutcome | None) -> str:
    """A judged change's counterfactual gain with its spread over the judge's replays."""
    if judged is None or judged.counterfactual_gain is None:
        return _pct(None)
    return escape(judged.counterfactual_text())


Slurm = Callable[[dict[str, Any]], "dict[str, str] | None"]


def _diff_list(rev: Revision, by_id: dict[int, Revision], slurm: Slurm) -> str:
    """The knobs `rev` changes against its parent, in Slurm's units where they are known."""
    if rev.parent is None:
        return f"<span class=muted>{len(rev.config)} knobs as found live</span>"
    if not rev.diff:
        return "<span class=muted>no change</span>"
    after = slurm(rev.config) or {}
    parent = by_id.get(rev.parent)
    before = (slurm(parent.config) if parent is not None else None) or {}
    return "<br>".join(f"<code>{escape(k)}</code> {escape(before.get(k, _v(a)))} &rarr; "
                       f"{escape(after.get(k, _v(b)))}" for k, (a, b) in sorted(rev.diff.items()))


def _btn(label: str, path: str, body: dict[str, Any] | None = None, *, cls: str = "",
         fields: dict[str, str] | None = None, bid: str = "") -> str:
    """A button that POSTs `body` to `path`; `fields` adds body keys read from inputs by id."""
    return (f'<button type=button{f" id={bid}" if bid else ""} class="{cls}" '
            f'data-path="{escape(path)}" data-body="{escape(json.dumps(body or {}))}" '
            f'data-fields="{escape(json.dumps(fields or {}))}">{escape(label)}</button>')


def render(status: AgentStatus, history: list[Revision], outcomes: list[OutcomeRow], *,
           state_dir: str, slurm: Slurm = lambda config: None) -> str:
    """The page; `slurm` turns a config into the Slurm settings the agent writes (None if it
    cannot), so that the page shows the values an operator finds in slurm.conf."""
    running, pending = status.running, status.pending
    banners = []
    if status.frozen:
        banners.append(f'<p class="banner frozen" id=frozen>Frozen by {escape(status.frozen_by)}'
                       f': {escape(status.frozen_reason or "no reason given")}. The agent '
                       "proposes and applies nothing until unfrozen.</p>")
    if status.agent_error:
        banners.append(f'<p class="banner blocked" id=agent-error>The agent cannot be opened: '
                       f'{escape(status.agent_error)}</p>')
    if status.interrupted_apply:
        banners.append(f'<p class="banner blocked">An apply of revision '
                       f'{status.interrupted_apply} was interrupted; the next action or round '
                       'restores the settings before it.</p>')
    if status.blocked:
        banners.append(f'<p class="banner blocked" id=blocked>Blocked: '
                       f'{escape(status.blocked)}</p>')
    if status.warnings:
        banners.append('<div class="banner blocked" id=loop-warnings><ul>'
                       + "".join(f"<li>{escape(w)}</li>" for w in status.warnings)
                       + "</ul></div>")
    if status.shadowed:
        banners.append('<div class="banner blocked" id=shadowed>Shadowed by the include file:<ul>'
                       + "".join(f"<li>{escape(s)}</li>" for s in status.shadowed)
                       + "</ul></div>")
    last = status.last_round
    parts = [
        f"<h1>autosched agent <small>{escape(state_dir)}</small></h1>",
        *banners,
        '<section class=summary><dl>'
        f'<dt>Running</dt><dd id=running-rev>{_rev_label(running)}</dd>'
        f'<dt>Mode</dt><dd id=mode>{escape(str(status.mode or "-"))}{_limits(status)}</dd>'
        f'<dt>Policy</dt><dd>{escape(str(status.policy or "-"))}, every '
        f'{_duration(status.period)}, connector '
        f'{escape(str((status.connector or {}).get("kind", "-")))}</dd>'
        f'<dt>Last round</dt><dd id=last-round>{_t(last.time if last else None)}'
        f'{_summary(last)}</dd>'
        f'<dt>Next round</dt><dd>{_t(status.next_round)}</dd>'
        f'<dt>Loop</dt><dd id=loop>{_loop(status)}</dd>'
        f'<dt>Slurm last read</dt><dd id=slurm-read>'
        f'{_t(status.live.time) if status.live else "never"}</dd>'
        f'<dt>Revisions</dt><dd>{status.revisions}</dd>'
        f'<dt>Cluster setup</dt><dd id=setup>{_setup(status.twin)}</dd>'
        f'<dt>Backfill</dt><dd id=backfill>'
        f'{escape(status.backfill.text()) if status.backfill else "not read yet"}</dd>'
        f'<dt>Last judged</dt><dd id=judged>{_judged(status.judged)}</dd></dl></section>',
        _token_box(status),
        _pending(pending, running, status.interrupted_apply),
        _running(running, history, status),
        _plot_section(outcomes),
        _config_over_time(history, slurm),
        _history(history, running, slurm, status.interrupted_apply),
    ]
    return _PAGE.format(body="\n".join(parts), version=escape(status.version),
                        poll_ms=POLL_S * 1000)


def _limits(status: AgentStatus) -> str:
    """What a round may propose or apply: the operator's bounds and, in auto mode, the step."""
    said = [f"{escape(k)} in [{lo:g}, {hi:g}]" for k, (lo, hi) in sorted((status.bounds or {}).items())]
    if status.max_step is not None:
        said.append(f"at most {status.max_step:.0%} of a knob's range per round")
    return f' <span id=limits class=muted>({"; ".join(said)})</span>' if said else ""


def _duration(s: float | None) -> str:
    if not s:
        return "-"
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n and s % n == 0:
            return f"{s / n:g} {unit}"
    return f"{s:g} s"


def _summary(last: RoundRecord | None) -> str:
    if last is None:
        return ""
    return f': {escape(last.action)}{": " + escape(last.why) if last.why else ""}'


def _setup(twin: TwinStatus | None) -> str:
    """The cluster's setup as the newest round read it: what changed, what the twin leaves out."""
    if twin is None:
        return "not read yet (each round reads it)"
    said = f"read {_t(twin.read_at)}: " + (f"{len(twin.changes)} change(s)" if twin.changes else "no change seen")
    items = [f"<li class=setup-change>changed: {escape(c)}</li>" for c in twin.changes]
    items += [f"<li class=left-out>{n} job(s) of the history left out of the twin: {escape(why)}</li>"
              for why, n in twin.left_out.items()]
    items += [f"<li class=twin-warning>{escape(w)}</li>" for w in twin.warnings]
    return said + (f"<ul>{''.join(items)}</ul>" if items else "")


def _judged(j: Judgement | None) -> str:
    """The judge's newest record: the three figures, then its verdict."""
    if j is None:
        return "no change judged yet (a change is judged one period after it went live)"
    return (f'revision {j.revision}: predicted gain <span id=judged-predicted>{_pct(j.predicted_gain)}'
            f'</span>, counterfactual gain <span id=judged-counterfactual>'
            f'{_gain(j)}</span>, twin error <span id=judged-twin-error>'
            f'{_pct(j.twin_error, sign=False)}</span><br><span id=judged-verdict>'
            f'{escape(j.verdict)}</span>')


def _rev_label(rev: Revision | None) -> str:
    if rev is None:
        return "none known (the agent has not recorded the live config yet)"
    return f'revision <b>{rev.id}</b> ({escape(rev.trigger)}), applied {_t(rev.applied_at)}'


def _token_box(status: AgentStatus) -> str:
    freeze = (_btn("Unfreeze", "/api/unfreeze", bid="unfreeze") if status.frozen else
              '<input id=freeze-reason placeholder="reason" maxlength=1000> '
              + _btn("Freeze", "/api/freeze", fields={"reason": "freeze-reason"}, cls="warn",
                     bid="freeze"))
    return ('<section class=controls><label>Token <input type=password id=token '
            'autocomplete=off placeholder="from STATE_DIR/service.token"></label> '
            f'{freeze} <span id=message role=status></span></section>')


def _slurm(rev: Revision | None, knob: str) -> str:
    v = ((rev.slurm if rev else None) or {}).get(knob)
    return f" <span class=slurm>({escape(v)})</span>" if v is not None else ""


def _loop(status: AgentStatus) -> str:
    beat = status.heartbeat
    if beat is None:
        return "no <code>agent run</code> ever ran here"
    state = "alive" if status.loop_alive else "not alive"
    return f"{state}: pid {beat.pid} on {escape(beat.host)}, last seen {_t(beat.time)}"


def _pending(rev: Revision | None, running: Revision | None,
             interrupted: int | None = None) -> str:
    if rev is None:
        return '<section id=pending><h2>Pending proposal</h2><p class=muted>none</p></section>'
    if rev.id == interrupted:
        # its apply began and has not ended: being applied now, or interrupted (the next round
        # or action restores the settings before it and marks it failed); never approvable
        return (f'<section id=pending><h2>Revision {rev.id}: being applied or interrupted</h2>'
                '<p id=pending-applying>Its apply began and has not ended; nothing to approve. '
                'If its process died, the next round or action restores the settings before it '
                'and records it as failed.</p></section>')
    ev = rev.evidence
    before = BackfillStats.from_dict(ev.backfill)  # what backfill cost when it was proposed
    shares = ev.knob_shares or {}
    rows = "".join(f"<tr><td data-label=knob><code>{escape(k)}</code></td>"
                   f"<td data-label=now>{_v(a)}{_slurm(running, k)}</td>"
                   f"<td data-label=proposed class=proposed>{_v(b)}{_slurm(rev, k)}</td>"
                   f"<td data-label=\"share of the gain\" class=share>{_share(shares.get(k))}</td>"
                   "</tr>" for k, (a, b) in sorted(rev.diff.items()))
    extra = "".join(f"<dt>{label}</dt><dd{attr}>{text}</dd>" for label, attr, text in (
        ("samples", "", _v(ev.samples) if ev.samples is not None else None),
        ("tuning cost", " id=tuning-cost", escape(cost_text(ev.tuning_cost))
         if ev.tuning_cost else None),
        ("reason", "", _v(ev.reason) if ev.reason is not None else None),
        ("left as they run (no share of the gain)", "",
         escape(", ".join(map(str, ev.dropped_knobs))) if ev.dropped_knobs else None),
        ("durations imputed", " id=imputed",
         f"{ev.imputed_durations} of {ev.history_jobs} history jobs "
         f"({ev.imputed_durations / ev.history_jobs:.0%}: unfinished, drawn)"
         if ev.history_jobs and ev.imputed_durations is not None else None),
        ("backfill before", " id=backfill-before",
         escape(before.text()) if before is not None else None),
        ("proposed, not applied", " id=held", escape(ev.held) if ev.held else None),
        ("portfolio", " id=portfolio", "<br>".join(map(escape, ev.portfolio_lines())) or None),
        ("per account and GPU size", " id=effects", "<br>".join(map(escape, ev.effect_lines())) or None))
        if text is not None)
    return (f'<section id=pending><h2>Pending proposal: revision {rev.id}</h2>'
            f'<dl><dt>Predicted gain</dt><dd id=predicted-gain>{escape(ev.predicted_text())}</dd>'
            f'<dt>Trigger</dt><dd>{escape(rev.trigger)}</dd>'
            f'<dt>Proposed</dt><dd>{_t(rev.created)}</dd>{extra}</dl>'
            '<table class=stack><tr><th>knob</th><th>now</th><th>proposed</th><th>share of the '
            f'gain</th></tr>{rows}</table><p>'
            f'<button type=button id=approve class=go data-rev="{rev.id}">Approve&hellip;</button>'
            + ' <input id=reject-reason placeholder="reason" maxlength=1000> '
            + _btn("Reject", f'/api/revisions/{rev.id}/reject', fields={"reason":
                   "reject-reason"}, bid="reject")
            + "</p>" + _confirm(rev) + "</section>")


def cost_text(cost: dict[str, Any]) -> str:
    """A round's tuning cost in words ("30 trials, 90 simulations, 12.4 s"), not its JSON."""
    said = []
    for key, unit in (("trials", "trials"), ("simulations", "simulations")):
        if isinstance(cost.get(key), (int, float)):
            said.append(f"{cost[key]:,.0f} {unit}")
    seconds = cost.get("wall_seconds", cost.get("seconds"))
    if isinstance(seconds, (int, float)):
        said.append(f"{seconds:,.1f} s")
    known = {"trials", "simulations", "wall_seconds", "seconds", "trial_seconds"}
    said += [f"{k} {v}" for k, v in cost.items() if k not in known]
    return ", ".join(said) or "-"


def _share(x: Any) -> str:
    """A knob's share of the predicted gain (the gain lost when only it goes back)."""
    return f"{x:.0%}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def _confirm(rev: Revision) -> str:
    """The approve's second step, filled in by the script from the preview: the include file's
    diff as the apply will write it, the operator's name, the final button."""
    return ('<div id=confirm hidden><p>Approving writes <code id=include-path></code> exactly as '
            'this diff shows, then reconfigures Slurm:</p><pre id=include-diff></pre>'
            '<details><summary>the whole file after</summary><pre id=include-after></pre>'
            '</details><p><label>Your name (recorded with the approval) <input id=operator-name '
            'maxlength=64 autocomplete=username placeholder="e.g. alice"></label> '
            f'<button type=button id=confirm-approve class=go>Apply revision {rev.id} as '
            'shown</button> <button type=button id=cancel-approve>Cancel</button> '
            '<span id=confirm-message role=status></span></p></div>')


def _running(rev: Revision | None, history: list[Revision], status: AgentStatus) -> str:
    if rev is None:
        return ""
    # which revision last set each knob to its running value: the newest applied change
    since: dict[str, int] = {}
    for r in sorted((r for r in history if r.applied_at is not None),
                    key=lambda r: r.applied_at or 0):
        for k in r.diff:
            since[k] = r.id
    slurm = rev.slurm or {}
    live = status.live.knobs if status.live else {}
    read = f"read {_t(status.live.time)}" if status.live else "not read yet"

    def in_slurm(k: str) -> str:
        got = live.get(k)
        if got is None:
            return "-"
        differs = k in slurm and got != slurm[k]
        return f'<span class={"differs" if differs else "same"}>{escape(got)}</span>'

    rows = "".join(f"<tr><td><code>{escape(k)}</code></td><td>{_v(v)}"
                   f"{' <span class=slurm>(' + escape(slurm[k]) + ')</span>' if k in slurm else ''}"
                   f"</td><td class=in-slurm>{in_slurm(k)}</td>"
                   f"<td>{since.get(k, '-')}</td></tr>" for k, v in sorted(rev.config.items()))
    return ('<section id=running><h2>Running config</h2><div class=scroll><table><tr><th>knob'
            f'</th><th>revision {rev.id}</th><th>in Slurm <small id=slurm-read-at>({read})</small>'
            f'</th><th>set by revision</th></tr>{rows}</table></div></section>')


def _config_over_time(history: list[Revision], slurm: Slurm) -> str:
    applied = sorted(((e.time, r) for r in history for e in r.events
                      if e.state is RevisionState.APPLIED), key=lambda x: x[0])
    if not applied:
        return ""
    by_id = {r.id: r for r in history}
    rows = "".join(f"<tr><td>{_t(t)}</td><td>{r.id}</td><td>{escape(r.trigger)}</td>"
                   f"<td>{_diff_list(r, by_id, slurm)}</td></tr>" for t, r in reversed(applied))
    return ('<section id=changes><h2>How the config changed</h2><div class=scroll><table><tr>'
            '<th>applied</th><th>rev</th><th>trigger</th><th>changes</th></tr>'
            f'{rows}</table></div></section>')


def _history(history: list[Revision], running: Revision | None, slurm: Slurm,
             interrupted: int | None = None) -> str:
    run_id = running.id if running else None
    by_id = {r.id: r for r in history}
    rows = []
    for r in history:
        last = r.events[-1]
        judged = r.outcome
        gain = r.evidence.predicted_gain
        err = judged.twin_error if judged else None
        act = ""
        if r.applied_at is not None and r.id != run_id:
            act = _btn("Roll back to this", "/api/rollback", {"revision": r.id},
                       bid=f"rollback-{r.id}")
        rows.append(
            f'<tr id=rev-{r.id} class="state-{r.state.value}"><td>{r.id}</td>'
            f'<td>{_t(r.created)}</td><td>{_state(r, interrupted)}</td>'
            f'<td>{escape(r.trigger)}</td><td>{_diff_list(r, by_id, slurm)}</td>'
            f'<td>{_pct(gain)}</td>'
            f'<td title="{escape(judged.verdict if judged else "")}">'
            f'{_gain(judged)}</td>'
            f'<td>{_pct(err, sign=False)}</td>'
            f'<td>{escape(last.actor)}{": " + escape(last.note) if last.note else ""}</td>'
            f'<td>{act}</td></tr>')
    return ('<section id=history><h2>Revisions</h2><div class=scroll><table><tr><th>rev</th>'
            '<th>created</th><th>state</th><th>trigger</th><th>changes</th><th>predicted</th>'
            '<th>counterfactual</th><th>twin error</th><th>last event</th><th></th></tr>'
            f'{"".join(rows)}</table></div></section>')


def _state(rev: Revision, interrupted: int | None) -> str:
    """A revision's state as the table shows it: one whose apply began and has not ended is
    "being applied or interrupted", not "proposed"."""
    if rev.id == interrupted:
        return "being applied or interrupted"
    return rev.state.value.replace("_", " ")


def _plot_section(outcomes: list[OutcomeRow]) -> str:
    return ('<section id=outcomes><h2>Predicted against counterfactual gain</h2>'
            f'{plot_svg(outcomes)}</section>')


def plot_svg(outcomes: list[OutcomeRow], width: int = 640, height: int = 240) -> str:
    """Per applied revision: predicted gain with its spread (bar) and the counterfactual gain
    the judge measured one period on."""
    pts = [o for o in outcomes if o.predicted_gain is not None or o.counterfactual_gain is not None]
    if not pts:
        return '<p class=muted id=plot-empty>No applied revision with a prediction yet.</p>'
    vals = [0.0]
    for o in pts:
        if o.predicted_gain is not None:
            s = o.spread or 0.0
            vals += [o.predicted_gain - s, o.predicted_gain + s]
        if o.counterfactual_gain is not None:
            vals.append(o.counterfactual_gain)
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.1 or 0.01
    lo, hi = lo - pad, hi + pad
    left, right, top, bottom = 56, 12, 28, 24
    pw, ph = width - left - right, height - top - bottom
    step = pw / len(pts)

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * ph

    out = [f'<svg id=plot xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role=img aria-label="predicted and counterfactual gain per '
           'revision">',
           f'<line x1="{left}" x2="{width - right}" y1="{y(0):.1f}" y2="{y(0):.1f}" '
           'class=zero />']
    for v in (lo, 0.0, hi):
        label = "0%" if v == 0 else f"{v:+.1%}"
        out.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor=end>{label}</text>')
    for i, o in enumerate(pts):
        x = left + step * (i + 0.5)
        out.append(f'<text x="{x:.1f}" y="{height - 6}" text-anchor=middle>r{o.revision}</text>')
        if o.predicted_gain is not None:
            s = o.spread or 0.0
            said = (f"{o.predicted_gain:+.2%} &plusmn; {s:.2%}" if o.spread is not None and
                    o.samples != 1 else f"{o.predicted_gain:+.2%} (one workload: no spread)"
                    if o.samples == 1 else f"{o.predicted_gain:+.2%}")
            out.append(f'<g class=predicted><title>revision {o.revision}: predicted '
                       f'{said}</title>'
                       f'<line x1="{x - 6:.1f}" x2="{x - 6:.1f}" y1="{y(o.predicted_gain - s):.1f}"'
                       f' y2="{y(o.predicted_gain + s):.1f}" />'
                       f'<circle cx="{x - 6:.1f}" cy="{y(o.predicted_gain):.1f}" r="4" /></g>')
        if o.counterfactual_gain is not None:
            out.append(f'<g class=counterfactual><title>revision {o.revision}: counterfactual '
                       f'{_gain(o.outcome) if o.outcome else f"{o.counterfactual_gain:+.2%}"}'
                       f'</title><rect x="{x + 2:.1f}" '
                       f'y="{y(o.counterfactual_gain) - 4:.1f}" width="8" height="8" /></g>')
    # (room for the labels: "counterfactual" is about 80 px at 11 px)
    out.append(f'<g class=legend><circle cx="{width - 250}" cy="10" r="4" class=p />'
               f'<text x="{width - 242}" y="14">predicted &plusmn; spread</text>'
               f'<rect x="{width - 106}" y="6" width="8" height="8" class=o />'
               f'<text x="{width - 94}" y="14">counterfactual</text></g></svg>')
    return "".join(out)


_PAGE = """<!doctype html>
<html lang=en><head><meta charset=utf-8><title>autosched agent</title>
<meta name=viewport content="width=device-width, initial-scale=1">
<link rel=icon href="data:,">
<style>
body{{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}}
h1 small{{font-size:.5em;color:#777;font-weight:normal}} h2{{font-size:1.1em;margin-top:1.6em}}
table{{border-collapse:collapse}} td,th{{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}}
dl{{display:grid;grid-template-columns:max-content auto;gap:2px 12px}} dt{{color:#666}} dd{{margin:0}}
.banner{{padding:.6em 1em;border-radius:4px}} .frozen{{background:#dbeafe}} .blocked{{background:#fef3c7}}
pre{{background:#f6f6f6;padding:.5em;overflow-x:auto}}
.muted{{color:#888}} .differs{{color:#b91c1c;font-weight:bold}} .slurm{{color:#666}} code{{font-size:.95em}} #message{{margin-left:1em}} .error{{color:#b91c1c}}
button{{padding:3px 10px;cursor:pointer;white-space:nowrap}} .go{{background:#16a34a;color:#fff;border:1px solid #15803d}}
.warn{{background:#2563eb;color:#fff;border:1px solid #1d4ed8}} .controls{{margin:1em 0}}
tr.state-proposed{{background:#fefce8}} tr.state-failed,tr.state-rolled_back{{color:#888}}
svg text{{font-size:11px;fill:#444}} svg .zero{{stroke:#999;stroke-dasharray:3 3}}
svg .predicted line{{stroke:#2563eb;stroke-width:2}} svg .predicted circle,svg .legend .p{{fill:#2563eb}}
svg .counterfactual rect,svg .legend .o{{fill:#ea580c}}
.scroll{{overflow-x:auto;max-width:100%}} svg#plot{{max-width:100%;height:auto}}
h1 small,dd,td{{overflow-wrap:anywhere}} dd{{min-width:0}} input{{max-width:100%}}
@media (max-width:640px){{
 body{{margin:.5em auto;padding:0 .5em}} dl{{grid-template-columns:1fr}} dt{{margin-top:.3em}}
 table.stack,table.stack tbody,table.stack tr,table.stack td{{display:block}}
 table.stack tr:first-child{{display:none}} table.stack tr{{border-bottom:1px solid #ddd;padding:.3em 0}}
 table.stack td{{border:0;padding:1px 4px}} table.stack td::before{{content:attr(data-label) ": ";color:#666}}
}}
</style></head>
<body data-version="{version}">
{body}
<script>
(function () {{
  const token = document.getElementById('token'), msg = document.getElementById('message');
  token.value = sessionStorage.getItem('autosched-token') || '';
  const near = document.getElementById('confirm-message');
  function say(text, error) {{
    // also beside the approve's buttons while they are shown: the top line is out of view
    for (const m of [msg, near]) {{
      if (!m || (m === near && near.closest('[hidden]'))) continue;
      m.textContent = text; m.className = error ? 'error' : '';
    }}
  }}
  async function failed(r) {{
    let d = r.statusText; try {{ d = (await r.json()).detail; }} catch (e) {{}}
    if (r.status === 401) sessionStorage.removeItem('autosched-token');
    say(r.status + ': ' + (typeof d === 'string' ? d : JSON.stringify(d)), true);
  }}
  async function post(path, body) {{
    let t = token.value.trim();
    if (!t) {{ t = (window.prompt('Bearer token (in STATE_DIR/service.token):') || '').trim(); token.value = t; }}
    if (!t) {{ say('an action needs the token', true); return; }}
    sessionStorage.setItem('autosched-token', t);
    say('...');
    const r = await fetch(path, {{method: 'POST', body: JSON.stringify(body),
      headers: {{'Authorization': 'Bearer ' + t, 'Content-Type': 'application/json'}}}});
    if (r.ok) {{ say('done'); location.reload(); return; }}
    await failed(r);
  }}
  function act(b) {{
    const body = JSON.parse(b.dataset.body), fields = JSON.parse(b.dataset.fields);
    for (const k in fields) {{ body[k] = document.getElementById(fields[k]).value; }}
    return post(b.dataset.path, body);
  }}
  document.querySelectorAll('button[data-path]').forEach(b => b.addEventListener('click', () => act(b)));
  const approve = document.getElementById('approve'), confirm = document.getElementById('confirm');
  const name = document.getElementById('operator-name'), diff = document.getElementById('include-diff');
  let shown = null;  // the diff on screen, sent back with the approve
  if (approve) approve.addEventListener('click', async () => {{
    const t = token.value.trim() || sessionStorage.getItem('autosched-token') || '';
    say('...');
    const r = await fetch('/api/revisions/' + approve.dataset.rev + '/preview',
      {{headers: t ? {{'Authorization': 'Bearer ' + t}} : {{}}}});
    if (!r.ok) {{ await failed(r); return; }}
    const p = await r.json();
    shown = p.diff;
    document.getElementById('include-path').textContent = p.path;
    diff.textContent = p.diff || '(the file stays as it is)';
    document.getElementById('include-after').textContent = p.after;
    name.value = name.value || sessionStorage.getItem('autosched-operator') || '';
    confirm.hidden = false; say('');
    name.focus();
  }});
  if (confirm) {{
    document.getElementById('cancel-approve').addEventListener('click', () => {{ confirm.hidden = true; shown = null; }});
    document.getElementById('confirm-approve').addEventListener('click', () => {{
      const who = name.value.trim();
      if (!/^[A-Za-z0-9._@-]{{1,64}}$/.test(who)) {{
        say('enter your name (letters, digits and ._@-): it is recorded with the approval', true);
        name.focus(); return; }}
      sessionStorage.setItem('autosched-operator', who);
      return post('/api/revisions/' + approve.dataset.rev + '/approve', {{operator: who, include_diff: shown}});
    }});
  }}
  setInterval(async () => {{
    if (document.activeElement && document.activeElement.tagName === 'INPUT') return;
    if (confirm && !confirm.hidden) return;  // never reload under an approval being confirmed
    try {{
      const s = await (await fetch('/api/status')).json();
      if (s.version && s.version !== document.body.dataset.version) location.reload();
    }} catch (e) {{}}
  }}, {poll_ms});
}})();
</script></body></html>
"""
