"""``autosched agent ...``: the live agent on a running Slurm cluster (init, step, run, status,
approve, reject, rollback, freeze, unfreeze, adopt). Errors rise to the one handler in
cli/__init__.py."""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..live.settings import SLURM_DEFAULTS, AgentSettings
from .common import LOOP, declared_flags, default_state, loop_options, settings_options
from .serve_cmd import serve_cmd

if TYPE_CHECKING:
    from ..live.round import RoundOutcome

agent_app = typer.Typer(help="The live agent: propose, apply, verify and roll back Slurm settings.",
                        no_args_is_help=True)

_STATE_HELP = "the agent's state directory (revision store, settings, history cache)"


def _state_opt() -> Any:
    return typer.Option(None, "--state", help=_STATE_HELP + " [default: $AUTOSCHED_STATE or ~/.autosched]")


def _actor_opt() -> Any:
    return typer.Option(None, "--actor", help="who acts, for the record [default: operator:$USER]")


def _actor(actor: Optional[str]) -> str:
    """Who acts, for the record (`live.audit.check_actor`: the API's rules)."""
    from ..live.audit import check_actor

    return check_actor(actor if actor is not None else f"operator:{getpass.getuser()}")


def _reason(reason: str) -> str:
    from ..live.audit import check_reason

    return check_reason(reason)


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


def _open(state: Optional[Path]):
    from ..live.agent import open_agent

    return open_agent(state or default_state())


@contextmanager
def _acting(state: Optional[Path]) -> Iterator[Any]:
    """The agent for one command that acts: what it says (a notice not delivered, ...) goes to
    standard error, and its notices are sent before the command ends."""
    from ..live.notify import flush_all

    agent = _open(state)
    agent.log = _warn
    try:
        yield agent
    finally:
        flush_all(agent.sinks)


def _kill_switch(state: Optional[Path]) -> Any:
    """The kill switch of the agent in `state`: the store alone, and the webhook if its URL can
    be read (live/killswitch.py); never the rest of the settings."""
    from ..live.killswitch import KillSwitch
    from ..live.notify import Webhook, notify_url

    st = state or default_state()
    url = notify_url(st, _warn) if (st / "settings.json").exists() else None
    return KillSwitch(st, [Webhook(url, str(st), _warn)] if url else [], log=_warn)


def _pairs(items: list[str], what: str, form: str = "KNOB=VALUE") -> dict[str, str]:
    from ..errors import InputError

    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise InputError(f"{what} {item!r}: use {form}")
        out[k.strip()] = v.strip()
    return out


# `agent init`'s options for the agent's own declared settings (AgentSettings); the connector's,
# --auto, --bound, --fix and --seed-history are read into their settings below.
LIVE_FLAGS = declared_flags(AgentSettings, ("min_jobs", "max_step", "rollback_margin", "max_twin_error",
                                            "notify", "time_scale", "cooldown", "brake",
                                            "verdict_wait"))


@agent_app.command("init")
@loop_options(AgentSettings)
@settings_options(AgentSettings, LIVE_FLAGS, "live")
def init_cmd(
    state: Optional[Path] = _state_opt(),
    slurm_conf: Optional[Path] = typer.Option(None, "--slurm-conf", help="slurm.conf [default: $SLURM_CONF]"),
    include: Optional[Path] = typer.Option(None, "--include", help="the file autosched owns; slurm.conf must end with `Include <it>` [default: autosched.conf beside slurm.conf]"),
    fake: Optional[Path] = typer.Option(None, "--fake", help="use the fake connector kept in this directory (tests, demos)"),
    auto: bool = typer.Option(False, "--auto", help="apply winners without approval (within --bound and --max-step); default: propose"),
    loop: dict[str, Any] = LOOP,
    live: dict[str, Any] = LOOP,
    bound: list[str] = typer.Option([], "--bound", help="KNOB=LO:HI limits of a knob (repeatable)"),
    fix: list[str] = typer.Option([], "--fix", help="KNOB=VALUE for a knob with no live setting (repeatable)"),
    seed_history: Optional[Path] = typer.Option(None, "--seed-history", help="an older sacct export that seeds the history"),
    timeout: float = typer.Option(SLURM_DEFAULTS["timeout"], "--timeout", help="seconds a Slurm command may take"),
) -> None:
    """Create the agent's state directory and save how it reaches the cluster and what it tunes.
    Every option and the cluster's setup are checked first: a refused init writes nothing."""
    from ..atomic import real_path
    from ..errors import InputError
    from ..live.agent import init_agent
    from ..live.errors import LiveError

    if fake is not None:
        connector: dict[str, Any] = {"kind": "fake", "directory": str(real_path(fake))}
    else:
        conf = slurm_conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
        if conf is None:
            raise InputError("no slurm.conf: set SLURM_CONF or pass its path")
        inc = include or conf.parent / "autosched.conf"
        connector = {"kind": "slurm", "slurm_conf": str(real_path(conf)),
                     "include": str(real_path(inc)), "timeout": timeout}
    bounds = {}
    for k, v in _pairs(bound, "bound", "KNOB=LO:HI").items():
        lo, sep, hi = v.partition(":")
        try:
            bounds[k] = [float(lo), float(hi)]
        except ValueError:
            raise InputError(f"bound {k}={v!r}: use KNOB=LO:HI") from None
    settings = AgentSettings(
        **loop, **live, connector=connector, mode="auto" if auto else "propose", bounds=bounds,
        fixed=_pairs(fix, "fix"), seed_history=str(real_path(seed_history)) if seed_history else None)
    if why := settings.single_replay():  # an older settings file says so; a new one is refused
        raise InputError(why)
    st = state or default_state()
    again = (st / "settings.json").exists()
    agent = init_agent(st, settings)
    typer.echo(f"agent {'re-' if again else ''}initialised in {st}: {settings.policy}, "
               f"{settings.mode} mode, period {settings.period:g} s; manages "
               f"{', '.join(agent.space.names)}")
    if again:
        kept = agent.store.newest_id()
        typer.echo(f"its store is kept: {kept} revision(s), the history of what ran")
    for knob, (low, high) in sorted(settings.bounds.items()):
        typer.echo(f"bound: {knob} in [{low:g}, {high:g}] (in propose and auto mode)")
    try:
        setup = agent.connector.setup()
    except LiveError as e:
        setup, warnings = None, [f"cannot read the cluster's setup yet ({e}); each round reads it"]
    # the fixed knobs as the twin of this cluster holds them (PriorityFlags as the cluster sets
    # it), without those it never reads (billing, when every partition has its own weights)
    fixed = dict(agent.space.fixed)
    unused: tuple[str, ...] = ()
    if setup is not None:
        warnings = setup.warnings()
        fixed = agent.view.twin_space(setup).fixed
        unused = setup.unused_knobs(fixed)
    if shown := {k: v for k, v in fixed.items() if k not in unused}:
        typer.echo("fixed in live mode (no Slurm setting): " +
                   ", ".join(f"{k}={v}" for k, v in shown.items()))
    if unused:
        typer.echo(f"not used on this cluster: {', '.join(unused)} (every partition bills its "
                   "jobs by its own TRESBillingWeights; `agent twin` lists them)")
    for w in warnings:
        typer.echo(f"warning: {w}")


@agent_app.command("step")
def step_cmd(state: Optional[Path] = _state_opt(),
             as_json: bool = typer.Option(False, "--json", help="print the round as JSON")) -> None:
    """Run one round now: read the history, tune, and propose (or apply, in auto mode).

    Exit code: 0 the round ran (proposed, applied, rolled back, waiting, nothing worth a change);
    3 frozen; 4 blocked by something temporary (Slurm does not answer), retried later; 5 blocked
    until an operator acts or more history comes (hand edit, too little history); 6 an apply,
    the guard's rollback or the tuning failed; 2 an error before the round could run."""
    from .common import print_json

    with _acting(state) as agent:
        out = agent.step()
    if as_json:
        print_json(out.to_summary())
    else:
        _print_round(out)
    if out.exit_code:
        raise typer.Exit(out.exit_code)


def _said(action: str, why: str) -> str:
    """A round's action and why as one line, the action said once ("tuning failed: tuning
    failed: ..." said it twice)."""
    return why if why.startswith(f"{action}:") else f"{action}: {why}"


def _print_round(out: RoundOutcome) -> None:
    typer.echo(_said(out.action.value, out.why))
    for said in out.merged or ():
        typer.echo(f"include file rewritten: {said}")
    for said in out.shadowed or ():
        typer.echo(f"warning: {said}")
    if out.history is not None:
        typer.echo(f"history: {out.history.jobs} jobs ({out.history.finished} finished), "
                   f"{out.history.malformed_rows} malformed sacct rows skipped")
    if out.revision is not None:
        typer.echo(f"revision {out.revision}")
    if out.retry_after is not None:
        typer.echo(f"retry in {out.retry_after:g} s")


@agent_app.command("run")
def run_cmd(state: Optional[Path] = _state_opt(),
            rounds: Optional[int] = typer.Option(None, "--rounds", help="stop after this many rounds"),
            poll: Optional[float] = typer.Option(None, "--poll", help="seconds between drift checks")) -> None:
    """Run rounds every period (and when the workload drifts) until stopped (Ctrl-C, SIGTERM).

    Logs one JSON line per round and action on standard output (docs/service.md)."""
    import signal
    import sys
    import threading

    from ..live.agent import start_agent
    from ..live.events_log import JsonLog
    from ..live.loop import run_lock
    from ..live.notify import flush_all

    log = JsonLog(sys.stdout)
    st = state or default_state()
    AgentSettings.load(st)  # "no agent here" before the lock is taken
    with run_lock(st):  # one loop per state directory
        agent = start_agent(st, log=log.message)
        stop = threading.Event()  # SIGTERM ends the wait between rounds at once, not after a poll

        def _stop(*_: Any) -> None:
            stop.set()
            agent.request_stop()  # gives up a round that reads or tunes; an apply ends first

        signal.signal(signal.SIGTERM, _stop)
        agent.sinks.append(log)
        try:
            agent.run(rounds=rounds, poll=poll, should_stop=stop.is_set, sleep=stop.wait)
        except KeyboardInterrupt:
            pass
        finally:
            flush_all(agent.sinks)


@agent_app.command("status")
def status_cmd(state: Optional[Path] = _state_opt(),
               as_json: bool = typer.Option(False, "--json", help="print the status as JSON"),
               history: int = typer.Option(10, "--history", help="revisions to list")) -> None:
    """The running revision, the pending proposal with its evidence, the history, and whether
    the agent is frozen or blocked and why."""
    from .common import print_json

    st = _open(state).status(history)
    if as_json:
        print_json(st.to_dict())
        return
    typer.echo(f"policy {st.policy}, {st.mode} mode, period {st.period:g} s, "
               f"connector {(st.connector or {}).get('kind')}")
    for k, (lo, hi) in sorted((st.bounds or {}).items()):
        typer.echo(f"bound: {k} in [{lo:g}, {hi:g}]")
    if st.max_step is not None:
        typer.echo(f"max step: {st.max_step:.0%} of a knob's range per round")
    if st.frozen:
        typer.echo(f"FROZEN by {st.frozen_by}: {st.frozen_reason or '(no reason given)'}")
    if st.blocked:
        typer.echo(f"BLOCKED: {st.blocked}")
    if st.interrupted_apply:
        typer.echo(f"an apply of revision {st.interrupted_apply} has not ended (in progress, or "
                   "interrupted: the next round or action restores the settings before it)")
    for w in st.warnings:
        typer.echo(f"warning: {w}")
    if st.live:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.live.time))
        typer.echo(f"Slurm last read {when} ({time.time() - st.live.time:.0f} s ago)")
    if st.running:
        typer.echo(f"running: revision {st.running.id} ({st.running.trigger})")
        for k, v in st.running.config.items():
            typer.echo(f"  {k} = {v}")
    else:
        typer.echo("running: no revision yet (the first round records the live config)")
    if st.pending:
        p = st.pending
        ev = p.evidence
        # a proposal made by hand (or by an older agent) may lack a figure: say so, never "+0.0%"
        metric = f" {ev.metric}" if ev.metric else ""
        # the guardrail's samples (fresh ones, or the tuning workloads of a deterministic source)
        judged = ev.validation_samples or ev.samples
        over = "" if judged is None or judged == 1 else f" over {judged} workload(s)"
        typer.echo(f"pending: revision {p.id} ({p.trigger}), predicted{metric} gain "
                   f"{ev.predicted_text()}{over}")
        shares = ev.knob_shares or {}
        for k, (a, b) in p.diff.items():
            share = shares.get(k)
            typer.echo(f"  {k}: {a} -> {b}" + ("" if not isinstance(share, (int, float)) else
                                                f"  ({share:.0%} of the gain)"))
        if ev.dropped_knobs:
            typer.echo("  left as they run (no share of the gain): " +
                       ", ".join(str(k) for k in ev.dropped_knobs))
        if ev.history_jobs and ev.imputed_durations:
            typer.echo(f"  durations imputed: {ev.imputed_durations} of {ev.history_jobs} "
                       f"history jobs ({ev.imputed_durations / ev.history_jobs:.0%}, unfinished)")
        if ev.held:
            typer.echo(f"  proposed, not applied: {ev.held}")
        for line in ev.portfolio_lines():
            typer.echo(f"  portfolio: {line}")
        for line in ev.effect_lines():
            typer.echo(f"  effect: {line}")
    if st.judged:
        j = st.judged
        typer.echo(f"judged: revision {j.revision}: predicted gain {_pct(j.predicted_gain)}, "
                   f"counterfactual gain {j.counterfactual_text()}, twin error "
                   f"{_pct(j.twin_error, sign=False)}")
        typer.echo(f"  {j.verdict}")
    if st.last_round:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.last_round.time))
        typer.echo(f"last round {when}: {_said(st.last_round.action, st.last_round.why)}")
    if st.twin:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.twin.read_at))
        typer.echo(f"cluster setup read {when}: " +
                   (f"{len(st.twin.changes)} change(s) since the one before" if st.twin.changes else "no change seen"))
        for c in st.twin.changes:
            typer.echo(f"  changed: {c}")
        for why, n in st.twin.left_out.items():
            typer.echo(f"  {n} job(s) of the history left out of the twin: {why}")
        for w in st.twin.warnings:
            typer.echo(f"warning: {w}")
    for said in st.shadowed:
        typer.echo(f"warning: {said}")
    if st.backfill is not None:
        typer.echo(f"backfill (sdiag): {st.backfill.text()}")
    typer.echo("history:")
    for r in st.history:
        last = r.events[-1]
        out = f"; outcome: {r.outcome.verdict}" if r.outcome else ""
        typer.echo(f"  {r.id:>3} {r.state.value:<11} {r.trigger:<16} "
                   f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(last.time))} "
                   f"{last.actor}: {last.note}{out}")


def _force_opt() -> Any:
    return typer.Option(False, "--force", help="apply even over a hand edit (a live value that is "
                        "not the running revision's); the discarded live values are recorded")


def _print_overridden(r: Any) -> None:
    for o in r.overridden:
        typer.echo(f"  discarded the hand-set {o.setting}={o.live} (the running revision had "
                   f"{o.expected})")


def _pct(v: float | None, sign: bool = True) -> str:
    """A relative figure in percent; "unknown" when there is none (never "+0.0%")."""
    return "unknown" if v is None else f"{v:+.1%}" if sign else f"{v:.1%}"


@agent_app.command("approve")
def approve_cmd(rev: int = typer.Argument(..., help="the proposed revision"),
                state: Optional[Path] = _state_opt(), actor: Optional[str] = _actor_opt(),
                force: bool = _force_opt()) -> None:
    """Apply a proposed revision: write the include file, reconfigure, check every value
    (the previous file comes back if any step fails). Refused over a hand edit unless --force."""
    who = _actor(actor)
    with _acting(state) as agent:
        r = agent.approve(rev, who, force=force)
    typer.echo(f"revision {r.id} applied: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in r.diff.items()))
    _print_overridden(r)


@agent_app.command("reject")
def reject_cmd(rev: int = typer.Argument(..., help="the proposed revision"),
               reason: str = typer.Option("", "--reason", help="why, for the record"),
               state: Optional[Path] = _state_opt(), actor: Optional[str] = _actor_opt()) -> None:
    """Reject a proposed revision."""
    who, why = _actor(actor), _reason(reason)
    with _acting(state) as agent:
        r = agent.reject(rev, who, why)
    typer.echo(f"revision {r.id} rejected")


@agent_app.command("rollback")
def rollback_cmd(rev: Optional[int] = typer.Argument(None, help="revision to return to [default: the one applied before the running one]"),
                 state: Optional[Path] = _state_opt(), actor: Optional[str] = _actor_opt(),
                 force: bool = _force_opt()) -> None:
    """Return to an earlier revision's config (recorded as a new revision). Refused over a hand
    edit unless --force."""
    who = _actor(actor)
    with _acting(state) as agent:
        r = agent.rollback(rev, who, force=force)
    typer.echo(f"revision {r.id} ({r.trigger}) applied: " +
               (", ".join(f"{k} {a} -> {b}" for k, (a, b) in r.diff.items()) or "no change"))
    _print_overridden(r)


@agent_app.command("freeze")
def freeze_cmd(reason: str = typer.Option("", "--reason", help="why, for the record"),
               state: Optional[Path] = _state_opt(), actor: Optional[str] = _actor_opt()) -> None:
    """Kill switch: the agent proposes and applies nothing until unfrozen (it needs the store
    only; when the store cannot be written, the stop file STATE/STOP is created instead)."""
    from ..live.notify import flush_all

    who, why = _actor(actor), _reason(reason)
    switch = _kill_switch(state)
    switch.freeze(who, why)
    typer.echo("agent frozen")
    flush_all(switch.sinks)


@agent_app.command("unfreeze")
def unfreeze_cmd(state: Optional[Path] = _state_opt(), actor: Optional[str] = _actor_opt()) -> None:
    """Let the agent propose (and, in auto mode, apply) again (removes the stop file too)."""
    from ..live.notify import flush_all

    who = _actor(actor)
    switch = _kill_switch(state)
    switch.unfreeze(who)
    typer.echo("agent unfrozen")
    flush_all(switch.sinks)


@agent_app.command("adopt")
def adopt_cmd(state: Optional[Path] = _state_opt(), actor: Optional[str] = _actor_opt()) -> None:
    """Record the live settings as they are now (after a hand edit you keep) as the running
    revision; this lifts the hand-edit block."""
    who = _actor(actor)
    with _acting(state) as agent:
        r = agent.adopt(who)
    typer.echo(f"revision {r.id} records the live config: " +
               (", ".join(f"{k} {a} -> {b}" for k, (a, b) in r.diff.items()) or "no change"))


@agent_app.command("twin")
def twin_cmd(state: Optional[Path] = _state_opt(),
             as_json: bool = typer.Option(False, "--json", help="print it as JSON")) -> None:
    """What the agent's twin models of the cluster right now: its partitions (nodes,
    PriorityTier, billing weights), the association tree with its shares, PriorityFlags, the jobs
    of the observed history and the columns they carry, and what the twin leaves out. Reads the
    cluster; writes nothing."""
    from ..cluster import billing_text
    from ..live.agent import read_only
    from ..live.view import observe_twin
    from .common import print_json

    settings, connector = read_only(state or default_state())
    setup, view = observe_twin(connector, state or default_state(), settings.history,
                               settings.seed_history)
    if as_json:
        print_json(view)
        return
    spec = setup.cluster_spec()
    typer.echo(f"twin of {setup.source or connector.kind}: {spec.describe()}")
    typer.echo("partitions:" if setup.partitions else "partitions: one pool (the policy's billing knobs)")
    for p in setup.ordered_partitions():
        typer.echo(f"  {p.name}{' (default)' if p.default else ''}: nodes {','.join(p.nodes)}, "
                   f"PriorityTier {p.priority_tier}, billing {billing_text(p.billing_weights)}")
    if view["associations"]:
        typer.echo("associations (shares):")
        for a in view["associations"]:
            who = f"user {a['user']} in {a['account']}" if a["user"] else \
                f"account {a['account']}" + (f" under {a['parent']}" if a["parent"] else "")
            typer.echo(f"  {who}: {a['shares']}")
    else:
        typer.echo("associations: none read (fair share over the history's accounts and users, equal shares)")
    typer.echo(f"priority flags: {','.join(view['priority_flags']) or '(none: Fair Tree)'}")
    cols = ", ".join(f"{k} {v}" for k, v in view["trace_columns"].items())
    typer.echo(f"history: {view['jobs']} jobs in the window; carrying {cols}")
    for w in view["warnings"]:
        typer.echo(f"warning: {w}")


agent_app.command("serve")(serve_cmd)  # the HTTP API and status page (cli/serve_cmd.py)
