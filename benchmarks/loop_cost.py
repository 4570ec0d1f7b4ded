"""Where autosched's loop spends its time, from committed `autosched run --json` results: per trace,
the rounds a seed by kind (at a boundary, the first and early rounds of period 0, the contention
trigger's, drift's) and each kind's share of the rounds' time, split into the search (16 trials on
the tuning samples) and the rest of the round (the portfolio raced on the guardrail's samples, the
samples drawn, the model fitted).

    PYTHONPATH=src python benchmarks/loop_cost.py                      # the committed multifactor runs
    PYTHONPATH=src python benchmarks/loop_cost.py benchmarks/results/runs/multifactor-cluster07.json

The shares are of wall seconds (each round's ``tuning_seconds``, its search's ``tuning_cost``
seconds): the loop runs in one process with one worker, so a round's wall time is its CPU time
stretched by the machine's load, and the shares are the CPU's as long as the load held steady
over a seed's run. The last column applies them to the run's CPU seconds a seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "benchmarks" / "results" / "runs"
KINDS = ("boundary", "period 0", "contention", "drift")


def kind_of(trigger: str) -> str:
    """A round's kind from its decision's ``trigger``."""
    if trigger.startswith("contention"):
        return "contention"
    if trigger.startswith("drift"):
        return "drift"
    return "period 0" if trigger in ("first round", "early round") else "boundary"


@dataclass
class Cost:
    """One trace's rounds over its seeds: per kind, the rounds, their search's and their rest's
    seconds; and each seed's CPU seconds."""

    seeds: int = 0
    rounds: dict[str, int] = field(default_factory=dict)
    search: dict[str, float] = field(default_factory=dict)
    rest: dict[str, float] = field(default_factory=dict)
    cpu: list[float] = field(default_factory=list)

    def add(self, strategy: dict[str, Any]) -> None:
        self.seeds += 1
        if strategy.get("cpu_seconds") is not None:
            self.cpu.append(float(strategy["cpu_seconds"]))
        for d in strategy["decisions"]:
            k = kind_of(d["trigger"])
            searched = float((d.get("tuning_cost") or {}).get("seconds", 0.0))
            self.rounds[k] = self.rounds.get(k, 0) + 1
            self.search[k] = self.search.get(k, 0.0) + searched
            self.rest[k] = self.rest.get(k, 0.0) + max(0.0, float(d["tuning_seconds"]) - searched)

    @property
    def total(self) -> float:
        return sum(self.search.values()) + sum(self.rest.values())


def cost_of(runs: Sequence[dict[str, Any]]) -> Cost:
    """The autosched strategy's rounds of `runs` (one result per seed)."""
    c = Cost()
    for r in runs:
        if "autosched" in r["strategies"]:
            c.add(r["strategies"]["autosched"])
    return c


def seeds_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A result's seeds: itself, and the others a merged ``--seeds`` result holds under ``runs``."""
    return [data, *data.get("runs", [])]


def table(named: Sequence[tuple[str, Cost]]) -> list[str]:
    out = ["| trace | seeds | CPU s a seed | kind | rounds a seed | search | rest of the round | CPU s a seed in it |",
           "|---|---|---|---|---|---|---|---|"]
    for name, c in named:
        cpu = statistics.mean(c.cpu) if c.cpu else float("nan")
        for k in KINDS:
            if k not in c.rounds:
                continue
            s, r = c.search[k] / c.total, c.rest[k] / c.total
            out.append(f"| {name} | {c.seeds} | {cpu:,.0f} | {k} | {c.rounds[k] / c.seeds:.1f} | {s:.0%} | {r:.0%} "
                       f"| {cpu * (s + r):,.0f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="run results (default: the committed multifactor runs)")
    args = ap.parse_args(argv)
    files = args.files or sorted(RUNS.glob("multifactor-*.json"))
    named = []
    for p in files:
        try:
            c = cost_of(seeds_of(json.loads(p.read_text())))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"error: {p}: not a readable `autosched run --json` result ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return 2
        if c.seeds and c.total > 0:
            named.append((p.stem.split("-", 1)[-1], c))
    print("\n".join(table(named)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
