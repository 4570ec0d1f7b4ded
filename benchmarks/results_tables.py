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
DOC = REPO / "docs" / "results.md"
IMG = REPO / "docs" / "img"
POLICIES = ("tiresias", "multifactor")  # a section each, in this order, whether or not runs exist
DAY = 86400.0
TARGET_SHARE = 0.60  # of oracle_static's gain, on average over the traces
TARGET_WORST = 1.02  # no period worse than the default by more than 2%


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
                         ("backlog_history", "--backlog-history", "--no-backlog-history")):
        if settings[key] != default[key]:
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


def read_row(path: Path) -> tuple[str, Row]:
    """(policy, row) of one committed run."""
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
    return settings["policy"], row


def read_rows(runs: Path) -> dict[str, list[Row]]:
    """Every committed run, by policy, each policy's rows in the order of TRACES, then by name."""
    order = {t.name: i for i, t in enumerate(TRACES)}
    out: dict[str, list[Row]] = {}
    for path in sorted(runs.glob("*.json")) if runs.is_dir() else []:
        policy, row = read_row(path)
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


def plot_data(rows: list[Row]) -> list[tuple[str, str, float, float]]:
    """(trace, strategy, mean % against the default, sd %) of every bar, rounded as printed."""
    return [(r.label, s, round(100 * (r.relative[s].mean - 1), 1), round(100 * r.relative[s].sd, 1))
            for r in rows for s in STRATEGIES[1:] if s in r.relative]


def digest(data: list[tuple[str, str, float, float]]) -> str:
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


def section(policy: str, rows: list[Row]) -> list[str]:
    """The generated part of one policy's section (between its markers)."""
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
    out += ["", f"![{policy}: average JCT against the default, per trace and strategy](img/results-{policy}.png)", "",
            f"<!-- plot data digest: {digest(plot_data(rows))} -->", "", "**Targets:**", ""]
    out += live_targets_table(rows) if runs_of(policy).limits else targets_table(rows)
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

def marker(policy: str, end: bool = False) -> str:
    return f"<!-- results: {'END' if end else 'BEGIN'} {policy} -->"


def render(doc: str, rows: dict[str, list[Row]]) -> str:
    """`doc` with each policy's generated section replaced (the text outside the markers is kept)."""
    for policy in sorted(set(POLICIES) | set(rows), key=lambda p: (p not in POLICIES, p)):
        begin, end = marker(policy), marker(policy, end=True)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pattern.search(doc):
            raise SystemExit(f"{DOC}: no markers {begin} ... {end} for the runs of {policy}")
        body = "\n".join([begin, *section(policy, rows.get(policy, [])), end])
        doc = pattern.sub(lambda _: body, doc)
    return doc


def stale_plots(doc: str, rows: dict[str, list[Row]], img: Path) -> list[str]:
    """Policies whose plot is missing or shows other figures than the doc's digest says."""
    out = []
    for policy, rs in rows.items():
        if not rs:
            continue
        shown = re.search(re.escape(marker(policy)) + r".*?plot data digest: (\w+)", doc, re.S)
        if not (img / f"results-{policy}.png").exists() or shown is None or shown.group(1) != digest(plot_data(rs)):
            out.append(policy)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=RUNS, help="the committed runs (default: %(default)s)")
    ap.add_argument("--doc", type=Path, default=DOC, help="the document to fill (default: %(default)s)")
    ap.add_argument("--img", type=Path, default=IMG, help="where the plots go (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the doc or a plot is not current")
    args = ap.parse_args()
    rows = read_rows(args.runs)
    old = args.doc.read_text()
    new = render(old, rows)
    stale = stale_plots(old, rows, args.img)
    if args.check:
        if new != old or stale:
            print(f"{args.doc}: not current with {args.runs}"
                  + (f" (plots: {', '.join(stale)})" if stale else "")
                  + "; run PYTHONPATH=src python benchmarks/results_tables.py", file=sys.stderr)
            raise SystemExit(1)
        print(f"{args.doc}: current ({sum(map(len, rows.values()))} runs)")
        return
    for policy in stale:
        plot(policy, rows[policy], args.img / f"results-{policy}.png")
    if new != old:
        args.doc.write_text(new)
    print(f"{args.doc}: {sum(map(len, rows.values()))} runs; plots redrawn: {', '.join(stale) or 'none'}")


if __name__ == "__main__":
    main()
