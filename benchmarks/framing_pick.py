"""How often the round's framing changes the pick: at each round of a replay (the default config
running, as in the default strategy's run), one round with the running jobs framed as Slurm has
them (they run on to their end) and one with them queued again at the round (the old framing),
each from a fresh controller on the same seed. Prints one JSON line per round (its leader, the
candidate and whether it deploys, under each framing) and a summary line.

    PYTHONPATH=src python benchmarks/framing_pick.py ../runs/limits/cluster02.csv --cluster 11x8
    PYTHONPATH=src python benchmarks/framing_pick.py LIMITS.csv --cluster 40x8 --policy multifactor
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from autosched.adapt.controller import default_tuner_factory
from autosched.adapt.experiment import Settings, boundaries, check_times, make_controller, start_config
from autosched.adapt.observe import observe
from autosched.cli.common import load_inputs
from autosched.export.live import live_subspace
from autosched.policies import get_policy
from autosched.sim import Simulator

DAY = 86400.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--policy", default="multifactor")
    ap.add_argument("--span", type=float, default=21.0, help="days replayed")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tr, cluster, _ = load_inputs(args.trace, args.cluster, quiet=True)
    tr = tr.window(tr.start, tr.start + args.span * DAY)
    sub = live_subspace(args.policy, {}) if args.policy == "multifactor" else None
    s = Settings(policy=args.policy, subspace=sub, seed=args.seed, trigger=False)
    sim = Simulator(tr, cluster, get_policy(args.policy)(start_config(s)))
    rounds = [t for t, _ in check_times(boundaries(tr, s.period), s, checks=False)]
    changed = 0
    for i, t in enumerate(rounds):
        sim.run(until=t)
        obs = observe(sim, t, max(tr.start, t - s.history), seed=s.seed)
        picks = {}
        for name, frame in (("framed", True), ("requeued", False)):
            ctl = make_controller("autosched", tr, cluster, replace(s, frame_running=frame),
                                  default_tuner_factory, None)
            ctl._round_offset = i  # the round's own seed, as in the run
            d = ctl.decide(obs)
            picks[name] = {"leader": d.leader, "deployed": d.deployed, "gain": d.predicted_gain,
                           "candidate": d.candidate if d.deployed else None}
        differs = (picks["framed"]["deployed"], picks["framed"]["candidate"]) != \
            (picks["requeued"]["deployed"], picks["requeued"]["candidate"])
        changed += differs
        print(json.dumps({"day": round((t - tr.start) / DAY, 2), "running_jobs": int(obs.running.sum()),
                          "differs": differs, **picks}), flush=True)
    print(json.dumps({"rounds": len(rounds), "pick_changed": changed}))


if __name__ == "__main__":
    main()
