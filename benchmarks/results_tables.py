"""The tables and plots of docs/results.md, made from the committed runs of `autosched run`.

Each run is the JSON that `autosched run ... --json` prints (with `--seeds N`: the first seed's
result, the other seeds under ``runs``), committed as ``benchmarks/results/runs/POLICY-NAME.json``.
This script reads every such file, writes one section per policy into docs/results.md between
its markers (``<!-- results: BEGIN POLICY -->`` ... ``<!-- results: END POLICY -->``) and one plot
per policy into docs/img/. A policy with no runs yet gets a section that says so. A figure
changes only when a result changes: the tables are a pure function of the files, and a plot is
redrawn only when the figures it shows change (their digest is written beside it in the doc).

    PYTHONPATH=src python benchmarks/results_tables.py           # rewrite docs/results.md, plots
    PYTHONPATH=src python benchmarks/results_tables.py --check   # exit 1 if the doc is not current

The runs behind the tables (one file per policy and trace; the trace arguments are in TRACES):

    autosched run --seeds 8 --json > benchmarks/results/runs/tiresias-sample.json
    autosched run ../shared/traces/microsoft-itp-elasticflow/cluster04.csv --cluster 88x8 --span 21d \\
        --seeds 8 --json > benchmarks/results/runs/tiresias-cluster04.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

RUNS = REPO / "benchmarks" / "results" / "runs"
# The runs made before jobs were sized by CPUs per GPU, the round framed as Slurm has it, the
# portfolio and the contention trigger: their tables stay beside the new ones, as they were.
BEFORE = REPO / "benchmarks" / "results" / "runs-before"
# today's loop's cost per trace, for the cost target (see LOOP_COST's docstring in the file)
LOOP_COST = REPO / "benchmarks" / "results" / "loop-cost-today.json"
# oracle_static_policy for a committed run made without it: ``POLICY-NAME.json``, a run of the
# same trace with ``--strategies default,oracle_static,oracle_static_policy`` (the oracles do not
# depend on the seed, nor the default: one seed gives every seed's bound). Used only when its
# default's average JCT is the run's own.
POLICY_ORACLE = REPO / "benchmarks" / "results" / "policy-oracle"
DOC = REPO / "docs" / "results.md"
IMG = REPO / "docs" / "img"
POLICIES = ("tiresias", "multifactor")  # a section each, in this order, whether or not runs exist
DAY = 86400.0
TARGET_SHARE = 0.60  # of oracle_static's gain, on average over the traces
TARGET_WORST = 1.02  # no period worse than the default by more than 2%
# multifactor (live knobs): this share of oracle_static's gain on every trace where it gains this much
TARGET_LIVE_SHARE, CEILING = 0.60, 0.05
TARGET_TIRESIAS_SHARE = 0.80  # tiresias: on average over the traces
TARGET_COST = 3.0  # the loop's CPU seconds against today's loop, on every trace
# the operator's policy against the default, per period, as a run's settings give it
# (autosched.adapt.constraints' defaults: an account's average wait a quarter longer, a size
# class's p95 wait twice, ten minutes each)
POLICY_ACCOUNT, POLICY_SIZE, POLICY_SLACK = 0.25, 1.0, 600.0


BUNDLED_PATH = "src/autosched/data/philly_2017-10-02_28d.csv.gz"


@dataclass(frozen=True)
class TraceRun:
    """How one trace is replayed: its label in the tables and its arguments of `autosched run`."""

    name: str  # the NAME of POLICY-NAME.json
    label: str
    trace: str  # the trace argument; "" for the bundled sample
    cluster: str  # NODESxGPUS
    skip: str = ""  # --skip
    span: int | None = None  # --span in days (None: the whole trace)
    days: int = 21  # the days replayed

    @property
    def source(self) -> str:
        """The trace file's name, as the run's "trace" ends."""
        return Path(self.trace).name if self.trace else BUNDLED

    def args(self, trace: str | None = None) -> list[str]:
        """The trace arguments of `autosched run`; `trace`: another file in place of this one's."""
        trace = self.trace if trace is None else trace
        out = [trace, f"--cluster {self.cluster}"] if trace else []
        return out + ([f"--skip {self.skip}"] if self.skip else []) + ([f"--span {self.span}d"] if self.span else [])

    def commands(self, policy: str, options: list[str], out: str) -> list[str]:
        """The commands that make the run `out` of `policy` with these `autosched run` options."""
        if not runs_of(policy).limits:
            return [" ".join(["autosched run", *self.args(), *options, f"--json > {out}"])]
        limited = f"limits/{self.name}.csv"
        return [f"autosched trace limits {self.trace or BUNDLED_PATH} --out {limited}",
                " ".join(["autosched run", *self.args(limited), *options, f"--json > {out}"])]


BUNDLED = "philly_2017-10-02_28d.csv.gz"
ITP = "../shared/traces/microsoft-itp-elasticflow/"
# The six replays of the docs, in the order the tables list them.
TRACES = (
    TraceRun("sample", "Bundled sample (Philly, 28 d), 32x8", "", "32x8", days=28),
    TraceRun("philly", "Philly Oct 2–23 2017, 72x8", "../shared/traces/philly/philly_jobs_sia.csv", "72x8", "28d", 21),
    TraceRun("cluster04", "ITP cluster04 (21 d), 88x8", ITP + "cluster04.csv", "88x8", span=21),
    TraceRun("cluster07", "ITP cluster07 (21 d), 40x8", ITP + "cluster07.csv", "40x8", span=21),
    TraceRun("cluster02", "ITP cluster02 (21 d), 11x8", ITP + "cluster02.csv", "11x8", span=21),
    TraceRun("cluster06", "ITP cluster06 (21 d), 15x8", ITP + "cluster06.csv", "15x8", span=21),
)
@dataclass(frozen=True)
class PolicyRuns:
    """How the docs' runs of one policy are made."""

    seeds: int  # the seeds a run gets (a noisy comparison needs several)
    limits: bool = False  # each trace gets time limits first (`autosched trace limits`): Slurm plans with them
    flags: tuple[str, ...] = ()  # more options of `autosched run`
    traces: tuple[TraceRun, ...] = ()  # this policy's replays of some TRACES, in place of theirs (by name)


# multifactor: over the knobs the live agent may write, on traces with drawn limits, as the agent
# searches on a real Slurm cluster; 3 seeds, as its simulation is the slower one. The bundled
# sample over its first 14 days: its 28 days cost about 7 CPU-hours over 3 seeds, as a queue this
# long makes backfill the slow part, and 14 days still give a first round and a period boundary.
POLICY_RUNS = {"tiresias": PolicyRuns(8), "multifactor": PolicyRuns(
    3, limits=True, flags=("--live-knobs",),
    traces=(TraceRun("sample", "Bundled sample (Philly, first 14 d), 32x8", "", "32x8", span=14, days=14),))}


def runs_of(policy: str) -> PolicyRuns:
    """How the docs' runs of `policy` are made (one seed, no limits, for a policy not listed)."""
    return POLICY_RUNS.get(policy, PolicyRuns(1))


def traces_of(policy: str) -> tuple[TraceRun, ...]:
    """The replays of `policy` in the docs: TRACES, with the policy's own in place of theirs."""
    own = {t.name: t for t in runs_of(policy).traces}
    return tuple(own.get(t.name, t) for t in TRACES)


STRATEGIES = ("default", "autosched", "last_period", "oracle_static", "oracle_period")


@dataclass(frozen=True)
class Stat:
    mean: float
    sd: float
    n: int

    @classmethod
    def of(cls, xs: list[float]) -> "Stat":
        n = len(xs)
        mean = sum(xs) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
        return cls(mean, sd, n)

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n)


@dataclass
class Row:
    """One trace's figures over the seeds of its run."""

    name: str
    label: str
    commands: list[str]
    seeds: list[int]
    default_hours: float
    relative: dict[str, Stat]  # avg JCT / the default's, per strategy present
    share: Stat | None  # autosched's share of oracle_static's gain
    lead: Stat | None  # last_period's relative avg JCT minus autosched's (> 0: autosched better)
    worst: Stat | None  # autosched's worst period / the default's
    worst_max: float | None
    better_seeds: int  # seeds on which autosched beat the default
    deployed: tuple[int, int]  # autosched's rounds deployed, of all (over the seeds)
    notes: list[str] = field(default_factory=list)
    cpus: str = ""  # how the run sized jobs in CPUs ("" for a run before it said)
    cpu: Stat | None = None  # autosched's CPU seconds over the seeds (None: not recorded)
    # the worst account (its average wait) and GPU-size class (its p95 wait) of autosched
    # against the default over every period of every seed: (name, period, default s, autosched s)
    worst_account: tuple[str, int, float, float] | None = None
    worst_size: tuple[str, int, float, float] | None = None
    policy_breaks: int = 0  # (period, seed) pairs where the policy's rules against the default break
    periods: int = 0  # (period, seed) pairs looked at
    # per strategy, the (period, seed) pairs that break the policy against the default
    breaks: dict[str, int] = field(default_factory=dict)
    policy_share: Stat | None = None  # autosched's share of oracle_static_policy's gain


def seeds_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each seed's result: the file's own, then those under ``runs`` (`--seeds N`)."""
    return [data, *data.get("runs", [])]


def trace_run(path: Path, data: dict[str, Any]) -> TraceRun:
    """The registered replay a file is of (by its trace, cluster and the days replayed), else one
    made from what the file says (a window's --skip cannot be read back: it is left out)."""
    source = Path(str(data["trace"])).name
    cluster = str(data["cluster"]).split(" ", 1)[0]
    days = round((data["boundaries"][-1] - data["boundaries"][0]) / DAY)
    name = path.stem.split("-", 1)[-1]
    for t in traces_of(str(data["settings"]["policy"])):
        # (a run on a trace with drawn limits reads limits/NAME.csv: it is known by its name)
        if (t.source == source or t.name == name) and t.cluster == cluster and t.days == days:
            return t
    known = next((t for t in TRACES if t.source == source), None)
    if known is not None:
        trace = known.trace
    else:
        parts = Path(str(data["trace"])).parts
        trace = ("../shared/traces/" + "/".join(parts[parts.index("traces") + 1:]) if "traces" in parts
                 else str(data["trace"]))
    bundled = source == BUNDLED and cluster == "32x8"
    return TraceRun(name, f"{source} ({days} d), {cluster}", "" if bundled else trace, cluster,
                    skip=known.skip if known is not None else "", span=days, days=days)


def _duration(seconds: float) -> str:
    for unit, size in (("d", DAY), ("h", 3600.0), ("m", 60.0)):
        if seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def cli_defaults(policy: str) -> dict[str, Any]:
    """The settings `autosched run --policy POLICY` makes with no other option (its defaults are
    the command's own, e.g. 2 workers)."""
    import inspect

    from autosched.adapt import STRATEGIES as KNOWN
    from autosched.adapt import Settings
    from autosched.cli.common import split_loop
    from autosched.cli.run_cmd import RunOptions, run_cmd

    given = {name: p.default.default for name, p in inspect.signature(run_cmd).parameters.items()}
    loop, rest = split_loop({**given, "policy": policy}, Settings)
    settings, _, _ = RunOptions.of({**rest, "loop": loop}).resolve(KNOWN)
    return settings.to_dict()  # as `run --json` gives it, the form of a saved run's settings


def options(settings: dict[str, Any], strategies: list[str], n_seeds: int) -> list[str]:
    """The `autosched run` options that give `settings` (only those that differ from the defaults)."""
    default = cli_defaults(settings["policy"])
    out: list[str] = []
    if settings["policy"] != "tiresias":
        out.append(f"--policy {settings['policy']}")
    flags = {"period": "--period", "history": "--history"}
    for key, flag in flags.items():
        if settings[key] != default[key]:
            out.append(f"{flag} {_duration(settings[key])}")
    from autosched.cli.common import loop_flags

    declared = {f.field: f.decls[0] for f in loop_flags()}  # each setting's option, as declared
    plain = ("budget", "samples", "validation_samples", "level_sd", "model", "metric", "guard_k",
             "guard_margin", "guard_max_loss")
    for key, flag in ((k, declared[k]) for k in plain):
        if settings[key] != default[key]:
            out.append(f"{flag} {settings[key]:g}" if isinstance(settings[key], float) else f"{flag} {settings[key]}")
    if settings["oracle_budget"] != 10 * settings["budget"]:
        out.append(f"--oracle-budget {settings['oracle_budget']}")
    if settings["first_decision"] != default["first_decision"]:
        first = settings["first_decision"]
        out.append("--first-decision " + ("off" if first is None else _duration(round(first * settings["period"]))))
    for key, on, off in (("with_replay", "--with-replay", "--model-only"), ("drift", "--drift", "--no-drift"),
                         ("early_rounds", "--early-rounds", "--no-early-rounds"),
                         ("backlog_history", "--backlog-history", "--no-backlog-history"),
                         ("trigger", "--trigger", "--no-trigger"),
                         ("frame_running", "--frame-running", "--requeue-running"),
                         ("portfolio", "--portfolio", "--no-portfolio")):
        # (a run made before a setting existed does not have it: nothing to say)
        if key in settings and settings[key] != default[key]:
            out.append(on if settings[key] else off)
    if settings["search"]["screening"] != default["search"]["screening"]:
        out.append("--screening" if settings["search"]["screening"] else "--no-screening")
    if settings["execution"]["workers"] != default["execution"]["workers"]:
        out.append(f"--workers {settings['execution']['workers']}")
    if settings["search"].get("subspace") is not None:
        out.append("--live-knobs")
    if settings["seed"] != 0:
        out.append(f"--seed {settings['seed']}")
    if n_seeds > 1:
        out.append(f"--seeds {n_seeds}")
    if list(strategies) != list(STRATEGIES):
        out.append(f"--strategies {','.join(strategies)}")
    return out


def read_row(path: Path, oracles: Path | None = None) -> tuple[str, Row]:
    """(policy, row) of one committed run; `oracles`: where its oracle_static_policy may be
    (POLICY_ORACLE for the committed runs)."""
    data = json.loads(path.read_text())
    runs = seeds_of(data)
    settings = data["settings"]
    tr = trace_run(path, data)
    names = list(data["strategies"])
    commands = tr.commands(settings["policy"], options(settings, names, len(runs)),
                           f"benchmarks/results/runs/{path.name}")
    rel = {s: Stat.of([r["summary"]["relative_avg_jct"][s] for r in runs])
           for s in STRATEGIES if s in names and "default" in names}
    shares = [r["summary"].get("share_of_oracle_static_gain", {}).get("autosched") for r in runs]
    share = Stat.of(shares) if shares and None not in shares and "autosched" in names else None
    lead = (Stat.of([r["summary"]["relative_avg_jct"]["last_period"] - r["summary"]["relative_avg_jct"]["autosched"]
                     for r in runs]) if {"default", "autosched", "last_period"} <= set(names) else None)
    worsts = [r["summary"].get("worst_period_vs_default", {}).get("autosched") for r in runs]
    has_worst = "autosched" in names and None not in worsts
    decisions = [d for r in runs for d in r["strategies"].get("autosched", {}).get("decisions", [])]
    row = Row(tr.name, tr.label, commands, [r["settings"]["seed"] for r in runs],
              data["strategies"]["default"]["avg_jct"] / 3600 if "default" in names else float("nan"),
              rel, share, lead, Stat.of(worsts) if has_worst else None, max(worsts) if has_worst else None,
              sum(r["summary"]["relative_avg_jct"]["autosched"] < 1 for r in runs) if "autosched" in rel else 0,
              (sum(bool(d["deployed"]) for d in decisions), len(decisions)))
    add_policy_oracle(row, path, runs, oracles)
    row.cpus = str((data.get("cpus") or {}).get("rule", ""))
    cpu = [r["strategies"]["autosched"].get("cpu_seconds") for r in runs if "autosched" in r["strategies"]]
    row.cpu = Stat.of(cpu) if cpu and None not in cpu else None
    if {"default", "autosched"} <= set(names):
        policy_against_default(row, runs)
    return settings["policy"], row


def add_policy_oracle(row: Row, path: Path, runs: list[dict[str, Any]], oracles: Path | None) -> None:
    """oracle_static_policy's figures and autosched's share of its gain, from the run itself or
    from its run in `oracles` (same trace and default); none when neither has it."""
    oracle: list[float] = []
    if all("oracle_static_policy" in r["strategies"] for r in runs):
        oracle = [r["strategies"]["oracle_static_policy"]["avg_jct"] for r in runs]
    elif oracles is not None and (extra := oracles / path.name).exists():
        other = json.loads(extra.read_text())
        default = other["strategies"]["default"]["avg_jct"]
        for key in ("cluster", "jobs", "boundaries", "workload"):  # (the trace's per-day series: its content)
            if other.get(key) != runs[0].get(key) or Path(other["trace"]).name != Path(runs[0]["trace"]).name:
                raise SystemExit(f"{extra}: not a run of the trace of {path.name} (its {key} or name differs)")
        if not math.isclose(default, runs[0]["strategies"]["default"]["avg_jct"], rel_tol=1e-9):
            raise SystemExit(f"{extra}: its default's average JCT is not that of {path.name}")
        oracle = [other["strategies"]["oracle_static_policy"]["avg_jct"]] * len(runs)
        tr = trace_run(path, runs[0])
        row.commands.append(tr.commands(str(other["settings"]["policy"]),
                                        options(other["settings"], list(other["strategies"]), 1),
                                        f"benchmarks/results/policy-oracle/{path.name}")[-1])
        for r in runs:
            mine = other["strategies"]["oracle_static_policy"]["periods"]
            r["strategies"] = {**r["strategies"], "oracle_static_policy": {"periods": mine}}
    if not oracle or "default" not in row.relative:
        return
    base = [r["strategies"]["default"]["avg_jct"] for r in runs]
    row.relative["oracle_static_policy"] = Stat.of([o / b for o, b in zip(oracle, base)])
    if "autosched" in runs[0]["strategies"] and all(b > o for b, o in zip(base, oracle)):
        row.policy_share = Stat.of([(b - r["strategies"]["autosched"]["avg_jct"]) / (b - o)
                                    for b, o, r in zip(base, oracle, runs)])


def policy_of(settings: dict[str, Any]) -> Any:
    """The operator's policy a run kept to (`PolicyConstraints`, the decision core's own check),
    with the run's tolerances (the defaults for a run made before they were settings)."""
    from autosched.adapt.constraints import PolicyConstraints

    return PolicyConstraints(settings.get("account_tolerance", POLICY_ACCOUNT),
                             settings.get("size_tolerance", POLICY_SIZE), None, wait_slack=POLICY_SLACK)


def period_score(period: dict[str, Any]) -> Any:
    """A period's accounts and size classes as run --json records them, as a `Score` (an account's
    usage is 0 in a run made before it was recorded: its tolerance is then not scaled by it)."""
    from autosched.adapt.scoring import Score

    acc, sizes = period["accounts"], period["sizes"]
    return Score(0.0, 0, {a: v["jobs"] for a, v in acc.items()}, {a: v["avg_queue"] for a, v in acc.items()},
                 {a: v.get("usage", 0.0) for a, v in acc.items()}, {k: v["jobs"] for k, v in sizes.items()},
                 {k: v["p95_queue"] for k, v in sizes.items()})


def policy_against_default(row: Row, runs: list[dict[str, Any]]) -> None:
    """The operator's policy over every period of every seed, each strategy against the default,
    checked as the decision core checks it (`PolicyConstraints`, one period's jobs for a sample):
    per strategy how many (period, seed) pairs break it, and for autosched the worst account
    (largest growth of its average wait) and GPU-size class (of its p95 wait). A run recorded
    before the periods kept their accounts and sizes leaves the row as it is."""
    from autosched.adapt.scoring import ScoreSet

    worst_a: tuple[float, tuple[str, int, float, float]] | None = None
    worst_s: tuple[float, tuple[str, int, float, float]] | None = None
    for r in runs:
        constraints = policy_of(r["settings"])
        base = r["strategies"]["default"].get("periods", [])
        if any("accounts" not in p for p in base):
            return
        for name, strat in r["strategies"].items():
            for p_def, p in zip(base, strat.get("periods", [])):
                check = constraints.check(ScoreSet((period_score(p_def),)), ScoreSet((period_score(p),)), {}, {})
                row.breaks[name] = row.breaks.get(name, 0) + (not check.holds)
        for p_def, p_auto in zip(base, r["strategies"]["autosched"].get("periods", [])):
            row.periods += 1
            for kind, key in (("accounts", "avg_queue"), ("sizes", "p95_queue")):
                for name, d in p_def[kind].items():
                    a = p_auto[kind].get(name)
                    if a is None:
                        continue
                    grow = a[key] - d[key]
                    entry = (grow, (name, p_def["index"], d[key], a[key]))
                    if kind == "accounts" and (worst_a is None or grow > worst_a[0]):
                        worst_a = entry
                    if kind == "sizes" and (worst_s is None or grow > worst_s[0]):
                        worst_s = entry
    row.policy_breaks = row.breaks.get("autosched", 0)
    row.worst_account = worst_a[1] if worst_a else None
    row.worst_size = worst_s[1] if worst_s else None


def read_rows(runs: Path, oracles: Path | None = None) -> dict[str, list[Row]]:
    """Every committed run, by policy, each policy's rows in the order of TRACES, then by name."""
    order = {t.name: i for i, t in enumerate(TRACES)}
    out: dict[str, list[Row]] = {}
    for path in sorted(runs.glob("*.json")) if runs.is_dir() else []:
        policy, row = read_row(path, oracles)
        out.setdefault(policy, []).append(row)
    for rows in out.values():
        rows.sort(key=lambda r: (order.get(r.name, len(order)), r.name))
    return out


# -- the tables ---------------------------------------------------------------------------------

def pct(x: float) -> str:
    return f"{x:+.1%}"


def cell(s: Stat | None, relative: bool = True) -> str:
    if s is None:
        return "n/a"
    mean = s.mean - 1 if relative else s.mean
    return f"{pct(mean)} ± {s.sd:.1%}" if s.n > 1 else pct(mean)


def seeds_text(seeds: list[int]) -> str:
    return f"{len(seeds)} ({seeds[0]}–{seeds[-1]})" if len(seeds) > 1 else f"1 ({seeds[0]})"


def results_table(rows: list[Row]) -> list[str]:
    out = ["| trace, cluster | seeds | default's avg JCT | autosched | share of oracle_static's gain | last_period "
           "| autosched's lead over last_period (s.e.) | oracle_static | oracle_period "
           "| autosched's worst period (mean / max) | autosched's rounds deployed |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lead = f"{pct(r.lead.mean)} ({r.lead.se:.1%})" if r.lead is not None else "n/a"
        worst = f"{pct(r.worst.mean - 1)} / {pct(r.worst_max - 1)}" if r.worst is not None and r.worst_max is not None else "n/a"
        share = f"{round(r.share.mean, 2) + 0.0:.0%}" if r.share is not None else "n/a"  # (no "-0%")
        out.append(f"| {r.label} | {seeds_text(r.seeds)} | {r.default_hours:.2f} h | {cell(r.relative.get('autosched'))} "
                   f"| {share} | {cell(r.relative.get('last_period'))} | {lead} "
                   f"| {cell(r.relative.get('oracle_static'))} | {cell(r.relative.get('oracle_period'))} "
                   f"| {worst} | {r.deployed[0]} of {r.deployed[1]} |")
    return out


def targets_table(rows: list[Row]) -> list[str]:
    """Each target, what the runs give, and whether it is met."""
    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    n = len(rows)
    out = ["| target | result | |", "|---|---|---|"]
    have = [r for r in rows if "autosched" in r.relative]
    better = [r for r in have if r.better_seeds == len(r.seeds)]
    out.append(f"| better than the default on every trace, on every seed | on {len(better)} of {n} traces "
               f"| {met(len(better) == n and n > 0)} |")
    shares = [r.share.mean for r in rows if r.share is not None]
    if len(shares) == n and n:
        mean = sum(shares) / n
        out.append(f"| ≥ {TARGET_SHARE:.0%} of oracle_static's gain, on average over the traces | {mean:.1%} "
                   f"| {met(mean >= TARGET_SHARE)} |")
    else:
        out.append(f"| ≥ {TARGET_SHARE:.0%} of oracle_static's gain, on average over the traces "
                   f"| not measured on {n - len(shares)} of {n} traces (no oracle_static, or it did not beat "
                   "the default) | |")
    leads = [r for r in rows if r.lead is not None]
    ahead = [r for r in leads if r.lead is not None and r.lead.mean >= 0]
    behind = ", ".join(f"{r.name} {pct(r.lead.mean)} (s.e. {r.lead.se:.1%})" for r in leads
                       if r.lead is not None and r.lead.mean < 0)
    out.append(f"| at least as good as last_period on every trace (mean over seeds) | on {len(ahead)} of {len(leads)} "
               f"traces{'; behind: ' + behind if behind else ''} | {met(len(ahead) == len(leads) == n and n > 0)} |")
    worst = [r for r in rows if r.worst_max is not None]
    ok = [r for r in worst if r.worst_max is not None and r.worst_max <= TARGET_WORST]
    over = ", ".join(f"{r.name} {pct(r.worst_max - 1)}" for r in worst
                     if r.worst_max is not None and r.worst_max > TARGET_WORST)
    out.append(f"| no period worse than the default by more than {TARGET_WORST - 1:.0%}, on any seed | on {len(ok)} of "
               f"{len(worst)} traces{'; worst: ' + over if over else ''} | {met(len(ok) == len(worst) == n and n > 0)} |")
    return out


def live_targets_table(rows: list[Row]) -> list[str]:
    """The targets of a policy tuned over the live knobs: a gain larger than the seeds' spread on
    every trace, last_period matched on most, and what there is to gain at all (oracle_static)."""
    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    n = len(rows)
    out = ["| target | result | |", "|---|---|---|"]
    gain = {r.name: r.relative["autosched"] for r in rows if "autosched" in r.relative}
    # one seed has no spread to be larger than: its trace is not counted as clear
    clear = [name for name, st in gain.items() if st.n > 1 and 1 - st.mean > st.sd]
    misses = ", ".join(f"{name} {pct(st.mean - 1)} ± {st.sd:.1%}" if st.n > 1 else
                       f"{name} {pct(st.mean - 1)} (one seed: no spread yet)"
                       for name, st in gain.items() if name not in clear)
    out.append(f"| better than the default on every trace by more than the spread across seeds | on {len(clear)} of "
               f"{n} traces{'; not on: ' + misses if misses else ''} | {met(len(clear) == n and n > 0)} |")
    leads = [r for r in rows if r.lead is not None]
    ahead = [r for r in leads if r.lead is not None and r.lead.mean >= 0]
    out.append(f"| at least as good as last_period on most traces (mean over seeds) | on {len(ahead)} of "
               f"{len(leads)} traces | {met(2 * len(ahead) > n)} |")
    ceiling = ", ".join(f"{r.name} {pct(r.relative['oracle_static'].mean - 1)}" for r in rows
                        if "oracle_static" in r.relative)
    out.append(f"| what the live knobs leave to gain: oracle_static against the default (ORACLE) | {ceiling or 'n/a'} "
               "| the ceiling |")
    return out


def load_costs(path: Path = LOOP_COST) -> dict[str, float]:
    """Today's loop's CPU seconds per run (``POLICY-NAME``), as measured (see the file's
    ``how``); empty when the file is missing."""
    if not path.exists():
        return {}
    return {k: float(v) for k, v in json.loads(path.read_text())["cpu_seconds"].items()}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.0f} min"


def policy_cost_table(policy: str, rows: list[Row], costs: dict[str, float]) -> list[str]:
    """Per trace: how jobs were sized, the worst account and GPU-size class against the default
    over every period of every seed, the (period, seed) pairs within the operator's policy, and
    the loop's CPU seconds against today's loop's."""
    out = ["| trace | jobs sized | worst account vs the default (average wait) | worst GPU-size class vs the "
           "default (p95 wait) | periods within the policy | autosched's CPU s a seed | today's loop | ratio |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        acct = (f"{r.worst_account[0]}, period {r.worst_account[1]}: {_minutes(r.worst_account[2])} -> "
                f"{_minutes(r.worst_account[3])}") if r.worst_account else "n/a"
        size = (f"{r.worst_size[0]} GPUs, period {r.worst_size[1]}: {_minutes(r.worst_size[2])} -> "
                f"{_minutes(r.worst_size[3])}") if r.worst_size else "n/a"
        within = f"{r.periods - r.policy_breaks} of {r.periods}" if r.periods else "n/a"
        cpu = f"{r.cpu.mean:,.0f} ± {r.cpu.sd:,.0f}" if r.cpu else "n/a"
        today = costs.get(f"{policy}-{r.name}")
        ratio = f"{r.cpu.mean / today:.1f}×" if r.cpu and today else "n/a"
        out.append(f"| {r.name} | {r.cpus or 'n/a'} | {acct} | {size} | {within} | {cpu} "
                   f"| {f'{today:,.0f}' if today else 'n/a'} | {ratio} |")
    return out


def decision_targets_table(policy: str, rows: list[Row], costs: dict[str, float]) -> list[str]:
    """The targets of the decision core: per policy the gain targets, then the operator's
    policy, the loop's cost and the jobs' sizing on every trace."""
    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    n = len(rows)
    out = ["| target | result | |", "|---|---|---|"]
    if policy == "tiresias":
        better = [r for r in rows if "autosched" in r.relative and r.better_seeds == len(r.seeds)]
        out.append(f"| better than the default on every trace, on every seed | on {len(better)} of {n} traces "
                   f"| {met(len(better) == n and n > 0)} |")
        shares = [r.share.mean for r in rows if r.share is not None]
        mean = sum(shares) / len(shares) if shares else float("nan")
        out.append(f"| ≥ {TARGET_TIRESIAS_SHARE:.0%} of oracle_static's gain, on average over the traces | "
                   f"{mean:.1%} over {len(shares)} traces | {met(len(shares) == n and mean >= TARGET_TIRESIAS_SHARE)} |")
    else:
        gains = [r for r in rows if "oracle_static" in r.relative and 1 - r.relative["oracle_static"].mean >= CEILING]
        short = [r for r in gains if r.share is None or r.share.mean < TARGET_LIVE_SHARE]
        said = ", ".join(f"{r.name} {'n/a' if r.share is None else f'{r.share.mean:.0%}'}" for r in gains)
        out.append(f"| ≥ {TARGET_LIVE_SHARE:.0%} of oracle_static's gain on every trace where it gains "
                   f"{CEILING:.0%} or more | {said or 'no such trace'} | {met(not short)} |")
        out += policy_share_target(rows)
    leads = [r for r in rows if r.lead is not None]
    behind = [r for r in leads if r.lead is not None and r.lead.mean < 0]
    said = ", ".join(f"{r.name} {pct(r.lead.mean)} (s.e. {r.lead.se:.1%})" for r in behind if r.lead is not None)
    out.append(f"| at least as good as last_period on every trace (mean over seeds) | on {len(leads) - len(behind)} "
               f"of {n} traces{'; behind: ' + said if said else ''} | {met(not behind and len(leads) == n > 0)} |")
    worst = [r for r in rows if r.worst_max is not None]
    over = ", ".join(f"{r.name} {pct(r.worst_max - 1)}" for r in worst
                     if r.worst_max is not None and r.worst_max > TARGET_WORST)
    out.append(f"| no period worse than the default by more than {TARGET_WORST - 1:.0%}, on any seed | "
               f"{'worst: ' + over if over else f'on {len(worst)} of {n} traces'} | "
               f"{met(not over and len(worst) == n > 0)} |")
    breaks = [r for r in rows if r.policy_breaks]
    out.append("| the operator's policy in every period of every run, against the default (an account's "
               f"average wait at most {POLICY_ACCOUNT:.0%} longer, a GPU-size class's p95 wait at most "
               f"{POLICY_SIZE + 1:.0f}×, each plus {POLICY_SLACK / 60:.0f} min) | "
               + (", ".join(f"{r.name}: {r.policy_breaks} of {r.periods} (period, seed) pairs break it"
                            for r in breaks) or "in every period") + f" | {met(not breaks)} |")
    ratios = {r.name: r.cpu.mean / costs[f"{policy}-{r.name}"] for r in rows
              if r.cpu is not None and costs.get(f"{policy}-{r.name}")}
    said = ", ".join(f"{k} {v:.1f}×" for k, v in ratios.items())
    out.append(f"| the loop's CPU seconds at most {TARGET_COST:g}× today's loop's, on every trace | "
               f"{said or 'not measured'} | {met(len(ratios) == n and all(v <= TARGET_COST for v in ratios.values()))} |")
    sized = [r for r in rows if "per GPU" in r.cpus]
    out.append(f"| jobs without CPU counts sized by CPUs per GPU | on {len(sized)} of {n} traces | "
               f"{met(len(sized) == n)} |")
    return out


def policy_share_target(rows: list[Row]) -> list[str]:
    """The share target against oracle_static_policy, on the traces whose runs have it."""
    have = [r for r in rows if "oracle_static_policy" in r.relative]
    if not have:
        return []
    gains = [r for r in have if 1 - r.relative["oracle_static_policy"].mean >= CEILING]
    short = [r for r in gains if r.policy_share is None or r.policy_share.mean < TARGET_LIVE_SHARE]
    said = ", ".join(f"{r.name} {'n/a' if r.policy_share is None else f'{r.policy_share.mean:.0%}'}" for r in gains)
    small = ", ".join(f"{r.name} {pct(r.relative['oracle_static_policy'].mean - 1)}" for r in have if r not in gains)
    return [f"| ≥ {TARGET_LIVE_SHARE:.0%} of oracle_static_policy's gain (ORACLE: the best fixed config that keeps "
            f"the operator's policy in every period) on every trace where it gains {CEILING:.0%} or more | "
            + "; ".join(x for x in (said, f"it gains less on {small}" if small else "") if x)
            + f" (measured on {len(have)} of {len(rows)} traces) | "
            + ("met" if not short and len(have) == len(rows) else "**not met**") + " |"]


def policy_oracle_table(rows: list[Row]) -> list[str]:
    """Per trace with oracle_static_policy: both static oracles, autosched's share of each one's
    gain, and the (period, seed) pairs within the operator's policy of each strategy."""
    have = [r for r in rows if "oracle_static_policy" in r.relative]
    if not have:
        return []

    def share(st: Stat | None, oracle: Stat) -> str:
        if 1 - oracle.mean < CEILING:
            return f"n/a (it gains {1 - oracle.mean:.1%})"
        return "n/a" if st is None else f"{round(st.mean, 2) + 0.0:.0%}"

    def within(r: Row, name: str) -> str:
        return f"{r.periods - r.breaks[name]} of {r.periods}" if name in r.breaks and r.periods else "n/a"

    out = ["| trace | autosched | oracle_static (ORACLE) | oracle_static_policy (ORACLE) | autosched's share of "
           "oracle_static's gain | of oracle_static_policy's gain | periods within the policy: autosched "
           "| last_period | oracle_static | oracle_static_policy |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in have:
        out.append(f"| {r.name} | {cell(r.relative.get('autosched'))} | {cell(r.relative.get('oracle_static'))} "
                   f"| {cell(r.relative['oracle_static_policy'])} | {share(r.share, r.relative['oracle_static'])} "
                   f"| {share(r.policy_share, r.relative['oracle_static_policy'])} | {within(r, 'autosched')} "
                   f"| {within(r, 'last_period')} | {within(r, 'oracle_static')} "
                   f"| {within(r, 'oracle_static_policy')} |")
    return out


def plot_data(rows: list[Row]) -> list[tuple[str, str, float, float]]:
    """(trace, strategy, mean % against the default, sd %) of every bar, rounded as printed."""
    return [(r.label, s, round(100 * (r.relative[s].mean - 1), 1), round(100 * r.relative[s].sd, 1))
            for r in rows for s in STRATEGIES[1:] if s in r.relative]


def digest(data: list[tuple[str, str, float, float]]) -> str:
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


def section(policy: str, rows: list[Row], before: bool = False, costs: dict[str, float] | None = None) -> list[str]:
    """The generated part of one policy's section (between its markers); `before`: the runs
    made before the decision core (their own targets, as they were shown)."""
    if not rows:
        plan = runs_of(policy)
        flags = ([] if policy == "tiresias" else [f"--policy {policy}"]) + [*plan.flags, f"--seeds {plan.seeds}"]
        return [f"No runs of `{policy}` are committed yet, so there is no table here. These commands "
                f"make them (one file per trace in `benchmarks/results/runs/`), and the last one fills "
                "this section:", "", "```sh",
                *(c for t in traces_of(policy) for c in t.commands(policy, flags, f"benchmarks/results/runs/{policy}-{t.name}.json")),
                "PYTHONPATH=src python benchmarks/results_tables.py", "```"]
    out = ["Average JCT against the fixed default, mean ± sd over the seeds; the share of "
           "oracle_static's gain is autosched's, on average over the seeds; the lead is last_period's "
           "change minus autosched's (> 0: autosched better), with its standard error. Oracles read "
           "the real future.", ""]
    out += results_table(rows)
    img = f"results-{policy}{'-before' if before else ''}.png"
    out += ["", f"![{policy}: average JCT against the default, per trace and strategy](img/{img})", "",
            f"<!-- plot data digest: {digest(plot_data(rows))} -->", "", "**Targets:**", ""]
    if before:
        out += live_targets_table(rows) if runs_of(policy).limits else targets_table(rows)
    else:
        out += decision_targets_table(policy, rows, costs or {})
        out += ["", "**The operator's policy and the loop's cost**, per trace (the worst account and size "
                "class over every period of every seed; today's loop: its CPU seconds on the same trace, "
                "`benchmarks/results/loop-cost-today.json`):", ""]
        out += policy_cost_table(policy, rows, costs or {})
        table = policy_oracle_table(rows)
        if table:
            out += ["", "**Against the oracle held to the operator's policy** (`oracle_static_policy`, an ORACLE: "
                    "of the configs oracle_static's search tried, the policy's archetypes and the default, the "
                    "best on the whole real trace whose every period keeps the policy against the default, "
                    "checked as the decision core checks it; a share only where the oracle gains "
                    f"{CEILING:.0%} or more; a run without it reads it from "
                    "`benchmarks/results/policy-oracle/`, made by the commands below):", ""] + table
    out += ["", "The runs (a `--seeds` run of every strategy per trace, the oracles' searches cached), "
            "then the tables:", "", "```sh"]
    out += [c for r in rows for c in r.commands]
    out += ["PYTHONPATH=src python benchmarks/results_tables.py", "```"]
    notes = [f"{r.name}: {n}" for r in rows for n in r.notes]
    return out + ([""] + notes if notes else [])


def plot(policy: str, rows: list[Row], path: Path) -> None:
    """Horizontal bars: each trace's strategies against the default, mean with its sd over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = plot_data(rows)
    shown = [s for s in STRATEGIES[1:] if any(d[1] == s for d in data)]
    labels = [r.label for r in rows]
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.22 * len(labels) * max(1, len(shown))))
    height = 0.8 / max(1, len(shown))
    for k, s in enumerate(shown):
        ys, xs, es = [], [], []
        for i, label in enumerate(labels):
            for t, name, mean, sd in data:
                if t == label and name == s:
                    ys.append(i + (k - (len(shown) - 1) / 2) * height)
                    xs.append(mean)
                    es.append(sd)
        ax.barh(ys, xs, height=height, xerr=es, label=s + (" (oracle)" if s.startswith("oracle") else ""),
                hatch="//" if s.startswith("oracle") else None, capsize=2)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("average JCT against the default (%), mean ± sd over the seeds (left is better)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(shown), fontsize="small", frameon=False)
    fig.suptitle(f"{policy}: autosched and the baselines, per trace")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


# -- the document ---------------------------------------------------------------------------------

def marker(policy: str, end: bool = False, before: bool = False) -> str:
    return f"<!-- results: {'END' if end else 'BEGIN'} {policy}{' before' if before else ''} -->"


def render(doc: str, rows: dict[str, list[Row]], before: dict[str, list[Row]] | None = None,
           costs: dict[str, float] | None = None) -> str:
    """`doc` with each policy's generated sections replaced (the text outside the markers is
    kept): the runs' and, where the doc has its markers, the runs made before the decision core."""
    for policy in sorted(set(POLICIES) | set(rows), key=lambda p: (p not in POLICIES, p)):
        doc = _replace(doc, marker(policy), marker(policy, end=True),
                       section(policy, rows.get(policy, []), costs=costs or {}), policy)
        old = (before or {}).get(policy)
        if old and marker(policy, before=True) in doc:
            doc = _replace(doc, marker(policy, before=True), marker(policy, end=True, before=True),
                           section(policy, old, before=True), policy)
    return doc


def _replace(doc: str, begin: str, end: str, body: list[str], policy: str) -> str:
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{DOC}: no markers {begin} ... {end} for the runs of {policy}")
    text = "\n".join([begin, *body, end])
    return pattern.sub(lambda _: text, doc)


def stale_plots(doc: str, rows: dict[str, list[Row]], img: Path, before: bool = False) -> list[str]:
    """Policies whose plot is missing or shows other figures than the doc's digest says."""
    out = []
    for policy, rs in rows.items():
        if not rs:
            continue
        shown = re.search(re.escape(marker(policy, before=before)) + r".*?plot data digest: (\w+)", doc, re.S)
        name = f"results-{policy}{'-before' if before else ''}.png"
        if not (img / name).exists() or shown is None or shown.group(1) != digest(plot_data(rs)):
            out.append(policy)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=RUNS, help="the committed runs (default: %(default)s)")
    ap.add_argument("--doc", type=Path, default=DOC, help="the document to fill (default: %(default)s)")
    ap.add_argument("--img", type=Path, default=IMG, help="where the plots go (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the doc or a plot is not current")
    args = ap.parse_args()
    rows = read_rows(args.runs, POLICY_ORACLE)
    before = read_rows(BEFORE)
    old = args.doc.read_text()
    new = render(old, rows, before, load_costs())
    stale = stale_plots(old, rows, args.img)
    stale_before = [p for p in stale_plots(old, before, args.img, before=True) if marker(p, before=True) in old]
    if args.check:
        if new != old or stale or stale_before:
            print(f"{args.doc}: not current with {args.runs}"
                  + (f" (plots: {', '.join(stale + stale_before)})" if stale or stale_before else "")
                  + "; run PYTHONPATH=src python benchmarks/results_tables.py", file=sys.stderr)
            raise SystemExit(1)
        print(f"{args.doc}: current ({sum(map(len, rows.values()))} runs)")
        return
    for policy in stale:
        plot(policy, rows[policy], args.img / f"results-{policy}.png")
    for policy in stale_before:
        plot(policy, before[policy], args.img / f"results-{policy}-before.png")
    if new != old:
        args.doc.write_text(new)
    print(f"{args.doc}: {sum(map(len, rows.values()))} runs; plots redrawn: {', '.join(stale) or 'none'}")


if __name__ == "__main__":
    main()
