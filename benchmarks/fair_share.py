"""Time multifactor's fair-share factor on a flat association tree (one user per account, as a
trace without users gives): the array/one-pass paths against the general tree walk.

    .venv/bin/python benchmarks/fair_share.py [--flags NO_FAIR_TREE] [--repeat 7] [--trace T --cluster C]

Default: the bundled 28-day Philly sample (its VCs are the accounts, no users) on 32x8 under the
default `multifactor` config with the given PriorityFlags. Runs the simulation in process,
alternating the flat path and the walk (the flat path switched off by pointing it at the walk),
and prints the best and median of each, the factor's time per call on the run's final usage, and
whether every job's start and end are identical both ways (they must be).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from autosched.cluster import parse_cluster  # noqa: E402
from autosched.data import SAMPLE_CLUSTER, sample_path  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.policies.fairshare import ShareTree  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace import load_trace  # noqa: E402

FLAT = {"NO_FAIR_TREE": ("classic", "_flat_classic", "_walk_classic"),
        "FAIR_TREE": ("fair_tree", "_flat_fair_tree", "_walk_fair_tree")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flags", choices=tuple(FLAT), default="NO_FAIR_TREE")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--trace", help="any supported trace format (default: the bundled sample)")
    ap.add_argument("--cluster", default=SAMPLE_CLUSTER)
    args = ap.parse_args()
    trace, _ = load_trace(args.trace or sample_path())
    spec = parse_cluster(args.cluster)
    factor, flat, walk = FLAT[args.flags]
    fast = getattr(ShareTree, flat)
    times: dict[str, list[float]] = {"flat": [], "walk": []}
    ends: dict[str, np.ndarray] = {}
    sim = None
    for _ in range(args.repeat):
        for way in times:
            setattr(ShareTree, flat, fast if way == "flat" else getattr(ShareTree, walk))
            try:
                sim = Simulator(trace, spec, get_policy("multifactor")({"PriorityFlags": args.flags}))
                t0 = time.perf_counter()
                sim.run()
                times[way].append(time.perf_counter() - t0)
            finally:
                setattr(ShareTree, flat, fast)
            rec = sim.records()
            ends[way] = np.concatenate([rec.first_start, rec.end])
    assert sim is not None
    pol = sim.policies[0]
    tree = pol.tree
    if not tree._flat:
        raise SystemExit(f"{args.trace}: the association tree is not flat; nothing to compare")
    print(f"{len(trace)} jobs on {args.cluster}, multifactor {args.flags}, {tree.leaves} accounts, one user each")
    for way, ts in times.items():
        per = min(timeit.repeat(lambda: getattr(tree, flat if way == "flat" else walk)(pol.used, pol.known),
                                number=2000, repeat=5)) / 2000
        print(f"  {way}: simulation best {min(ts):.3f} s, median {statistics.median(ts):.3f} s "
              f"({len(ts)} runs); {factor} factor {per * 1e6:.1f} us a call")
    print(f"  every job's start and end identical both ways: {np.array_equal(ends['flat'], ends['walk'])}")


if __name__ == "__main__":
    main()
