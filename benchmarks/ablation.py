"""What each part of the decision core is worth: `multifactor` over the live knobs on traces with
drawn limits (as in docs/results.md), autosched against the fixed default, with one part taken
out at a time, over the same seeds.

The full core is the results' own run (``benchmarks/results/runs/multifactor-NAME.json``); each
part taken out is a run of the default and autosched alone, one file per part and trace in
``benchmarks/results/ablation/PART-NAME.json`` (seeds made apart are merged with
merge_seeds.py). This script prints the commands of every run and writes the table into
docs/adaptive.md between its markers; the table is a pure function of the files.

    PYTHONPATH=src python benchmarks/ablation.py             # rewrite the table in docs/adaptive.md
    PYTHONPATH=src python benchmarks/ablation.py --check     # exit 1 if the doc is not current
    PYTHONPATH=src python benchmarks/ablation.py --commands  # the runs that make the files
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "benchmarks" / "results" / "runs"
ABLATION = REPO / "benchmarks" / "results" / "ablation"
DOC = REPO / "docs" / "adaptive.md"
BEGIN, END = "<!-- ablation: BEGIN -->", "<!-- ablation: END -->"
SEEDS = 3


@dataclass(frozen=True)
class Part:
    """One part of the decision core taken out: how `autosched run` is told to."""

    name: str  # the PART of PART-NAME.json
    label: str
    flag: str = ""  # an option of `autosched run`
    cluster: str = ""  # appended to the cluster's NODESxGPUS


PARTS = (
    Part("no-trigger", "without the contention trigger", flag="--no-trigger"),
    Part("requeue-running", "without the framing (running jobs queued again at a round)", flag="--requeue-running"),
    Part("no-portfolio", "without the portfolio (the search's best alone)", flag="--no-portfolio"),
    Part("no-cpus-per-gpu", "without CPUs per GPU (one CPU per node)", cluster=",DefCpuPerGPU=0"),
)


@dataclass(frozen=True)
class Trace:
    name: str  # the NAME of multifactor-NAME.json and of limits/NAME.csv
    cluster: str
    args: str = "--span 21d"


TRACES = (Trace("cluster02", "11x8"), Trace("cluster06", "15x8"), Trace("cluster07", "40x8"))


def command(part: Part, trace: Trace) -> str:
    out = f"benchmarks/results/ablation/{part.name}-{trace.name}.json"
    return " ".join(x for x in (
        f"autosched run limits/{trace.name}.csv --cluster {trace.cluster}{part.cluster} {trace.args}",
        "--policy multifactor --live-knobs --strategies default,autosched --workers 1",
        f"--seeds {SEEDS}", part.flag, f"--json > {out}") if x)


@dataclass(frozen=True)
class Cell:
    """autosched against the default over the seeds of one run."""

    rel: list[float]  # autosched's avg JCT / the default's, per seed
    worst: float  # autosched's worst period against the default, over every seed
    deployed: int
    rounds: int
    cpu: float  # autosched's CPU seconds, mean over the seeds
    seeds: tuple[int, ...] = ()  # the seed of each of `rel`

    def cells(self) -> list[str]:
        n = len(self.rel)
        mean = sum(self.rel) / n - 1
        sd = math.sqrt(sum((x - 1 - mean) ** 2 for x in self.rel) / (n - 1)) if n > 1 else 0.0
        return [f"{mean:+.1%} ± {sd:.1%}", str(n), f"{self.worst - 1:+.1%}", f"{self.deployed} of {self.rounds}",
                f"{self.cpu:,.0f}"]

    def against(self, full: "Cell | None") -> str:
        """This run's change minus the full core's, paired by seed over the seeds both ran: mean
        (its standard error); > 0: the part taken out was worth having."""
        theirs = dict(zip(full.seeds, full.rel)) if full is not None else {}
        diffs = [a - theirs[k] for k, a in zip(self.seeds, self.rel) if k in theirs]
        if not diffs or len(diffs) != len(self.rel):
            return "n/a"
        n = len(diffs)
        mean = sum(diffs) / n
        se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else 0.0
        return f"{mean:+.1%} ({se:.1%})"


def read_cell(path: Path) -> Cell | None:
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    runs = [data, *data.get("runs", [])]
    auto = [r["strategies"]["autosched"] for r in runs]
    decisions = [d for a in auto for d in a.get("decisions", [])]
    return Cell([r["summary"]["relative_avg_jct"]["autosched"] for r in runs],
                max(r["summary"]["worst_period_vs_default"]["autosched"] for r in runs),
                sum(bool(d["deployed"]) for d in decisions), len(decisions),
                sum(float(a.get("cpu_seconds") or 0.0) for a in auto) / len(auto),
                tuple(int(r["settings"]["seed"]) for r in runs))


def table(runs: Path = RUNS, ablation: Path = ABLATION) -> list[str]:
    """The generated part of the doc: per trace with a run of the full core, the full core and
    each part taken out (those run so far)."""
    out = ["autosched's average JCT against the fixed default, mean ± sd over the seeds; its worst period "
           "against the default, over the seeds; its rounds deployed over the seeds; its CPU seconds a seed "
           "(mean); against the full core: the change minus the full core's, paired by seed, with its "
           "standard error (> 0: the part was worth having). Generated by `benchmarks/ablation.py` from "
           "the committed runs.", "",
           "| trace | decision core | autosched | seeds | against the full core (s.e.) | worst period | rounds deployed "
           "| CPU s |",
           "|---|---|---|---|---|---|---|---|"]
    made = []
    for t in TRACES:
        full = read_cell(runs / f"multifactor-{t.name}.json")
        parts = [(p, read_cell(ablation / f"{p.name}-{t.name}.json")) for p in PARTS]
        if full is None and all(c is None for _, c in parts):
            continue
        for label, cell in [("the full core (the run of [Results](results.md))", full),
                            *((p.label, c) for p, c in parts)]:
            shown = cell.cells() if cell is not None else ["not run", "", "", "", ""]
            vs = "—" if cell is full else cell.against(full) if cell is not None else ""
            out.append(f"| {t.name} | {label} | " + " | ".join([*shown[:2], vs, *shown[2:]]) + " |")
        made += [command(p, t) for p, c in parts if c is not None]
    if made:
        out += ["", "The runs (the limits files as in [Results](results.md)), then the table:", "", "```sh",
                *made, "PYTHONPATH=src python benchmarks/ablation.py", "```"]
    else:
        out += ["", "No part has been taken out in a committed run yet; `PYTHONPATH=src python benchmarks/ablation.py "
                "--commands` prints the runs."]
    return out


def render(doc: str, body: list[str]) -> str:
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{DOC}: no markers {BEGIN} ... {END}")
    text = "\n".join([BEGIN, *body, END])
    return pattern.sub(lambda _: text, doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the doc is not current")
    ap.add_argument("--commands", action="store_true", help="print the runs' commands, one a line")
    args = ap.parse_args()
    if args.commands:
        print("\n".join(command(p, t) for p in PARTS for t in TRACES))
        return
    old = DOC.read_text()
    new = render(old, table())
    if args.check:
        if new != old:
            print(f"{DOC}: not current; run PYTHONPATH=src python benchmarks/ablation.py", file=sys.stderr)
            raise SystemExit(1)
        print(f"{DOC}: current")
        return
    if new != old:
        DOC.write_text(new)
    print(f"{DOC}: written")


if __name__ == "__main__":
    main()
