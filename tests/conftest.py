from __future__ import annotations

from pathlib import Path

import pytest

# Real components (Slurm cluster, headless Chromium): fixtures, markers and the CI skip guard.
pytest_plugins = ["testbed"]

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The real traces in ../shared/traces (CI has them beside the checkout)."""
    if not SHARED_TRACES.exists():
        pytest.skip("../shared/traces is not beside this checkout")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def philly_2d(shared_traces):
    from autosched.trace import load_trace

    trace, _ = load_trace(shared_traces / "philly" / "slices" / "philly_2017-10-02_2d.csv")
    return trace


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Commands that cache (the oracles' searches of `autosched run`) write under a test's own
    directory, never the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
