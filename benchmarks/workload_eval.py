"""Workload-model benchmarks: the documented evaluation runs, their tables and figures, and timing.

    python benchmarks/workload_eval.py commands           # the exact `autosched workload evaluate` runs
    python benchmarks/workload_eval.py run OUT [NAME...]  # run them (all, or the named ones) into OUT/
    python benchmarks/workload_eval.py table OUT          # markdown tables from OUT/*/report.json
    python benchmarks/workload_eval.py plot OUT DOCS_DIR  # PNG figures for docs/workload.md
    python benchmarks/workload_eval.py timing             # fit / sample seconds per model on Philly

Numbers in docs/workload.md come from these commands on committed code.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
PHILLY = TRACES / "philly" / "philly_jobs_sia.csv"
ITP = TRACES / "microsoft-itp-elasticflow"
COMMON = ["--policy", "tiresias", "--models", "replay,stat,hybrid,hybrid:level=count", "--samples", "3", "--panel", "30"]
# name -> (trace, cluster, extra options). Sizes load each ITP cluster ~0.6-0.8 (see docs/workload.md).
RUNS: dict[str, tuple[Path, str, list[str]]] = {
    "philly": (PHILLY, "32x8", ["--max-duration", "2d", "--first", "49d", "--last", "91d"]),
    "cluster04": (ITP / "cluster04.csv", "72x8", ["--first", "21d"]),
    "cluster07": (ITP / "cluster07.csv", "44x8", ["--first", "21d"]),
    "cluster02": (ITP / "cluster02.csv", "16x8", ["--first", "21d"]),
    "cluster06": (ITP / "cluster06.csv", "16x8", ["--first", "21d"]),
    "cluster03": (ITP / "cluster03.csv", "32x8", ["--first", "32d"]),
    "cluster05": (ITP / "cluster05.csv", "2x8", ["--first", "21d"]),
    "cluster01": (ITP / "cluster01.csv", "8x8", ["--first", "44d"]),
}


def command(name: str, out: Path) -> list[str]:
    trace, cluster, extra = RUNS[name]
    return ["autosched", "workload", "evaluate", str(trace), "--cluster", cluster, *extra, *COMMON,
            "--report", str(out / name), "--json"]


def run(out: Path, names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    exe = str(Path(sys.executable).parent / "autosched")
    for name in names or list(RUNS):
        cmd = command(name, out)
        t0 = time.perf_counter()
        with open(out / f"{name}.json", "w") as f:
            subprocess.run([exe, *cmd[1:]], stdout=f, check=True)
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)


# ------------------------------------------------------------------------------ tables


def pooled(data: dict) -> dict[str, list[tuple[float, float]]]:
    """Per model and origin: Spearman and regret of the config chosen on the *mean* objective of
    the model's samples (what a tuner that averages over several sampled workloads would pick).
    For each stochastic model M evaluated beside replay, also ``M+replay``: the mean over the
    replayed week and M's samples (what the controller's ModelSource(with_replay=True) tunes on)."""
    from scipy.stats import spearmanr

    out: dict[str, list[tuple[float, float]]] = {}
    mixes = {f"{m}+replay": [m, "replay"] for m in data["results"] if m != "replay" and "replay" in data["results"]}
    for model, parts in [*((m, [m]) for m in data["results"]), *mixes.items()]:
        rows = []
        for k, real in enumerate(data["reals"]):
            gen = np.mean([s["objective"] for p in parts for s in data["results"][p][k]["samples"]], axis=0)
            obj = np.asarray(real["objective"])
            rho = float(spearmanr(gen, obj).statistic) if np.ptp(gen) > 0 and np.ptp(obj) > 0 else math.nan
            rows.append((rho, float(obj[int(np.argmin(gen))] / obj.min() - 1)))
        out[model] = rows
    return out


def _pooled_vs_replay(pool: dict, model: str) -> str:
    """Origins where the pooled choice of `model` has a higher Spearman / lower regret / the same
    regret as replay's."""
    a, b = np.array(pool[model], dtype=float), np.array(pool["replay"], dtype=float)
    return (f"{int(np.sum(a[:, 0] > b[:, 0]))} / {int(np.sum(a[:, 1] < b[:, 1] - 1e-12))} / "
            f"{int(np.sum(np.abs(a[:, 1] - b[:, 1]) <= 1e-12))} of {len(a)}")


def table(out: Path) -> str:
    lines = ["| trace | cluster | origins | model | Spearman (mean ± sd) | regret (mean ± sd) | pooled Spearman | pooled regret "
             "| KS inter-arrival | KS log duration | KS GPUs | KS GPU-h by hour | load ratio | beats replay: rho / regret / tied "
             "| pooled beats replay |",
             "|" + "---|" * 15]
    per_origin = []
    for name in RUNS:
        rep = out / name / "report.json"
        if not rep.exists():
            continue
        data = json.loads(rep.read_text())
        summ, pool = data["summary"], pooled(data)
        n = len(data["reals"])
        for model, e in summ.items():
            vs = e.get("vs_replay")
            beats = f"{vs['spearman_better']} / {vs['regret_better']} / {vs['regret_tied']} of {n}" if vs else ""
            pr = np.array(pool[model], dtype=float)
            lines.append(f"| {name} | {data['cluster'].split(' ')[0]} | {n} | {model} | {_f(e['spearman_mean'])} ± {_f(e['spearman_std'])} "
                         f"| {_f(e['regret_mean'])} ± {_f(e['regret_std'])} | {_f(np.nanmean(pr[:, 0]) if np.isfinite(pr[:, 0]).any() else math.nan)} "
                         f"| {_f(np.mean(pr[:, 1]))} | {_f(e['ks_interarrival_mean'])} | {_f(e['ks_log_duration_mean'])} "
                         f"| {_f(e['ks_gpus_mean'])} | {_f(e['ks_gpu_hours_tod_mean'])} | {_f(e['load_ratio_mean'], 2)} | {beats} "
                         f"| {_pooled_vs_replay(pool, model) if vs else ''} |")
        for model in (m for m in pool if m.endswith("+replay")):
            pr = np.array(pool[model], dtype=float)
            lines.append(f"| {name} | {data['cluster'].split(' ')[0]} | {n} | {model} (pooled only) | | "
                         f"| {_f(np.nanmean(pr[:, 0]))} | {_f(np.mean(pr[:, 1]))} | | | | | | | {_pooled_vs_replay(pool, model)} |")
        per_origin.append(_origin_table(name, data, pool))
    return "\n".join(lines) + "\n\n" + "\n\n".join(per_origin)


def _origin_table(name: str, data: dict, pool: dict) -> str:
    models = list(data["results"])
    head = (f"**{name}** per origin — Spearman / regret per model (mean of samples; [min..max] regret)\n\n"
            "| origin (day) | real jobs | offered load | default regret | random regret | " + " | ".join(models) + " |\n"
            "|" + "---|" * (5 + len(models)))
    rows = []
    for k, real in enumerate(data["reals"]):
        cells = []
        for m in models:
            smp = data["results"][m][k]["samples"]
            rho = [s["spearman"] for s in smp if s["spearman"] is not None]
            reg = [s["regret"] for s in smp]
            cells.append(f"{_f(np.mean(rho) if rho else math.nan, 2)} / {_f(np.mean(reg))} [{_f(min(reg), 2)}..{_f(max(reg), 2)}]")
        rows.append(f"| {real['origin'] / 86400:.0f} | {real['jobs']:,} | {real['load']:.2f} | {_f(real['default_regret'])} "
                    f"| {_f(real['random_regret'])} | " + " | ".join(cells) + " |")
    return head + "\n" + "\n".join(rows)


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


# ------------------------------------------------------------------------------ figures


def plot(out: Path, docs: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs.mkdir(parents=True, exist_ok=True)
    names = [n for n in RUNS if (out / n / "report.json").exists()]
    fig, axes = plt.subplots(2, len(names), figsize=(2.6 * len(names), 5.2), squeeze=False)
    colors = {"replay": "black", "stat": "tab:blue", "hybrid": "tab:green", "neural": "tab:orange"}
    for j, name in enumerate(names):
        data = json.loads((out / name / "report.json").read_text())
        days = [r["origin"] / 86400 for r in data["reals"]]
        for m, per in data["results"].items():
            rho = [np.mean([s["spearman"] for s in r["samples"] if s["spearman"] is not None] or [np.nan]) for r in per]
            reg = [np.mean([s["regret"] for s in r["samples"]]) for r in per]
            c = colors.get(m.split(":")[0], None)
            axes[0, j].plot(days, rho, "o-", color=c, ms=3, lw=1, label=m)
            axes[1, j].plot(days, reg, "o-", color=c, ms=3, lw=1, label=m)
        axes[1, j].plot(days, [r["default_regret"] for r in data["reals"]], "x:", color="grey", ms=4, lw=0.8, label="default config")
        axes[0, j].set_title(f"{name} ({data['cluster'].split(' ')[0]})", fontsize=9)
        axes[0, j].set_ylim(-1.05, 1.05)
        axes[1, j].set_xlabel("origin (day)", fontsize=8)
        for ax in axes[:, j]:
            ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("Spearman rho (higher better)", fontsize=8)
    axes[1, 0].set_ylabel("regret of chosen config (lower better)", fontsize=8)
    axes[1, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(docs / "workload_fidelity.png", dpi=90)
    plt.close(fig)
    for name in ("philly", "cluster04"):
        if (out / name / "report.json").exists():
            _curves(json.loads((out / name / "report.json").read_text()), name, docs / f"workload_curves_{name}.png", plt)


def _curves(data: dict, name: str, path: Path, plt) -> None:
    k = 0  # the first origin
    real = data["reals"][k]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    hours = np.arange(len(real["arrivals"])) / 24
    axes[0].plot(hours, real["arrivals"], color="black", lw=1.2, label="real")
    axes[1].plot(hours, real["demand"], color="black", lw=1.2, label="real")
    for c, (m, per) in zip(["grey", "tab:blue", "tab:green", "tab:orange"], data["results"].items()):
        s = per[k]["samples"][0]
        axes[0].plot(hours, s["arrivals"], color=c, lw=0.8, label=m)
        axes[1].plot(hours, s["demand"], color=c, lw=0.8, label=m)
        for s in per[k]["samples"]:
            axes[2].scatter(np.asarray(real["objective"]) / 3600, np.asarray(s["objective"]) / 3600, s=10, color=c)
    axes[1].axhline(data["gpus"], color="grey", ls="--", lw=0.8, label="capacity")
    lim = axes[2].get_xlim()
    axes[2].plot(lim, lim, ":", color="grey", lw=0.6)
    axes[0].set(xlabel="days after origin", ylabel="jobs per hour", title=f"{name}, origin day {real['origin'] / 86400:.0f}: arrivals")
    axes[1].set(xlabel="days after origin", ylabel="GPUs", title="GPU demand (jobs started at submit)")
    axes[2].set(xlabel="avg JCT on real week (h)", ylabel="avg JCT on generated week (h)", title="decision fidelity: 13 configs")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------------------- timing


def timing() -> None:
    from autosched.trace import load_trace
    from autosched.workload import get_model

    tr, _ = load_trace(PHILLY)
    tr = tr.take(tr.duration <= 2 * 86400)
    o = 49 * 86400.0
    hist = tr.window(o - 21 * 86400, o)
    for name in ("replay", "stat", "hybrid", "neural"):
        t0 = time.perf_counter()
        m = get_model(name)().fit(hist, o - 21 * 86400, o)
        t1 = time.perf_counter()
        s = m.sample(o, 7 * 86400, 0)
        t2 = time.perf_counter()
        print(f"{name}: fit {t1 - t0:.2f} s on {len(hist):,} jobs; sample {t2 - t1:.2f} s for {len(s):,} jobs")


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("commands", "run", "table", "plot", "timing"):
        sys.exit(__doc__)
    if argv[0] == "commands":
        for name in RUNS:
            print(" ".join(command(name, Path(argv[1] if len(argv) > 1 else "out"))))
    elif argv[0] == "run":
        run(Path(argv[1]), argv[2:])
    elif argv[0] == "table":
        print(table(Path(argv[1])))
    elif argv[0] == "plot":
        plot(Path(argv[1]), Path(argv[2]))
    else:
        timing()


if __name__ == "__main__":
    main(sys.argv[1:])
