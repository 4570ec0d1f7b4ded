"""Count the Python bytecodes one simulation executes, per function: a deterministic cost measure.

    .venv/bin/python benchmarks/sim_bytecodes.py TRACE [--policy tiresias] [--cluster 32x8] [--top 25]

Wall-clock times on a shared virtual machine move by +-30% from one minute to the next; the
number of bytecodes does not, so it shows whether a change to the engine or a policy made the
interpreter's work smaller (C-level work such as heap or bisect operations is not counted).
Tracing makes the run about 20 times slower.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from autosched.cluster import fit_to_cluster, parse_cluster  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace import load_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--policy", default="tiresias")
    ap.add_argument("--cluster", default="32x8")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    trace, _ = load_trace(a.trace)
    cluster = parse_cluster(a.cluster)
    trace, _ = fit_to_cluster(trace, cluster)
    sim = Simulator(trace, cluster, get_policy(a.policy)({}))
    ops: Counter[str] = Counter()
    calls: Counter[str] = Counter()

    def tracer(frame, event, arg):
        if event == "call":
            calls[frame.f_code.co_qualname] += 1
            frame.f_trace_opcodes, frame.f_trace_lines = True, False
        elif event == "opcode":
            ops[frame.f_code.co_qualname] += 1
        return tracer

    sys.settrace(tracer)
    try:
        sim.run()
    finally:
        sys.settrace(None)
    total = sum(ops.values())
    print(f"{a.policy} on {a.trace} ({len(trace):,} jobs): {total:,} bytecodes, "
          f"{sum(calls.values()):,} Python calls")
    for name, n in ops.most_common(a.top):
        print(f"{n / total:6.1%} {n:12,} {calls[name]:9,} calls {n / calls[name]:7.0f}/call  {name}")


if __name__ == "__main__":
    main()
