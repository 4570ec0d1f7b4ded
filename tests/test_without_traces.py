"""A clone with no real traces beside it (a newcomer's machine): the tests that need them skip,
and the run says once, at its end, which were skipped and why."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def test_tests_needing_the_traces_skip_and_are_summed_up(tmp_path):
    missing = tmp_path / "no-traces-here"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI"))}
    env.update(AUTOSCHED_TRACES=str(missing), CI="false")
    # test_slurm_twin.py reads its jobs from a trace; test_trace_real.py has seven tests on them
    out = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider",
                          "tests/test_slurm_twin.py", "tests/test_trace_real.py"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("8 skipped"), lines[-3:]
    summary = lines[-2]
    assert summary.startswith(f"8 test(s) need the real traces and were skipped because the real traces are "
                              f"not in {missing}: test_slurm_twin.py (1), test_trace_real.py (7)."), summary
    assert "FileNotFoundError" not in out.stdout
