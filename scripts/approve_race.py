"""How often do concurrent approvals of one proposal apply it more than once?

    PYTHONPATH=src .venv/bin/python scripts/approve_race.py [--runs 15] [--procs 6]

Each run makes an agent on the fake connector with revision 2 proposed, starts PROCS
`autosched agent approve 2` at once, and checks that exactly one succeeded and that revision 2
has exactly the events proposed, applied. Prints the runs that did not, and their count.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def seed(state: Path) -> None:
    from autosched.live.agent import AgentSettings, init_agent
    from autosched.live.fake import FakeConnector

    FakeConnector.create(state.parent / "fake")
    agent = init_agent(state, AgentSettings(connector={"kind": "fake",
                                                       "directory": str(state.parent / "fake")}))
    base = agent.view.running_or_baseline()
    agent.store.create({**base.config, "PriorityWeightAge": 5000}, trigger="period",
                       actor="agent:propose", parent=base.id)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--procs", type=int, default=6)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    exe = str(Path(sys.executable).with_name("autosched"))
    bad = 0
    with tempfile.TemporaryDirectory(prefix="autosched-race-") as tmp:
        for run in range(args.runs):
            state = Path(tmp) / str(run) / "state"
            seed(state)
            procs = [subprocess.Popen([exe, "agent", "approve", "2", "--state", str(state)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for _ in range(args.procs)]
            outs = [(p.wait(120), p.stderr.read().strip()) for p in procs]
            with sqlite3.connect(state / "state.db") as db:
                events = [e for (e,) in db.execute(
                    "SELECT state FROM events WHERE rev_id = 2 ORDER BY seq")]
            if sum(code == 0 for code, _ in outs) != 1 or events != ["proposed", "applied"]:
                bad += 1
                print(f"run {run}: events {events}; {outs}")
    print(f"{bad} of {args.runs} runs applied revision 2 other than exactly once "
          f"({args.procs} concurrent approvals each)")


if __name__ == "__main__":
    main()
