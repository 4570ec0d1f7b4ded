"""Put runs of one experiment made apart back together: `autosched run --json` results of
different seeds (e.g. one seed per core, each `--seed K`) merged into the file one `--seeds N`
run over those seeds prints, for benchmarks/results/runs/ and results_tables.py.

    autosched run TRACE ... --seed 0 --json > s0.json   # side by side, one per core
    autosched run TRACE ... --seed 1 --json > s1.json
    PYTHONPATH=src python benchmarks/merge_seeds.py s0.json s1.json > merged.json

A file that is not such a result, a seed given twice or missing between two others, or runs
that differ in anything but the seed (settings, trace and its per-day workload, window,
strategies) stop it with the file named and exit code 2, and nothing is printed. Run every seed
from one commit: the files do not say which code made them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from autosched.adapt.experiment import merge_seed_runs  # noqa: E402
from autosched.errors import AutoschedError  # noqa: E402

NEEDED = ("settings", "trace", "cluster", "jobs", "boundaries", "workload", "strategies", "summary")


def load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise AutoschedError(f"{path}: cannot read a JSON result ({e})") from None
    missing = [k for k in NEEDED if not isinstance(data, dict) or k not in data]
    if missing:
        raise AutoschedError(f"{path}: not an `autosched run --json` result (no {', '.join(missing)})")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="`autosched run --json` results, one or more seeds each")
    args = ap.parse_args(argv)
    try:
        merged = merge_seed_runs([(str(p), load(p)) for p in args.files])
    except AutoschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    json.dump(merged, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
