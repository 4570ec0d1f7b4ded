"""What a command's module imports at its top is paid by every run of that command (`autosched
agent freeze`, `agent status`) and by each test that runs one as a process: the heavy libraries
are imported where a command uses them, not when its module loads. Building the whole CLI loads
every command's module, so it checks them all."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

HEAVY = ("scipy.stats", "scipy.special", "torch", "matplotlib", "optuna", "sklearn", "ray")


def test_building_the_cli_imports_no_heavy_library():
    code = ("import json, sys; from autosched.cli import build_app; build_app(); "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_scenario_levels_still_read_the_normal_quantiles():
    from statistics import NormalDist

    from autosched.workload.level import scenario_levels

    # 3 levels of sd 0.5: exp(0.5 z) at the quantiles 1/6, 1/2, 5/6, divided by their mean
    z = [NormalDist().inv_cdf(q) for q in (1 / 6, 1 / 2, 5 / 6)]
    raw = [math.exp(0.5 * x) for x in z]
    want = [r / (sum(raw) / 3) for r in raw]
    assert [round(v, 12) for v in scenario_levels(3, 0.5)] == [round(v, 12) for v in want]
