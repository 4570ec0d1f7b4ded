from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

# Real components (Slurm cluster, headless Chromium): fixtures, markers and the CI skip guard.
pytest_plugins = ["testbed"]

REPO = Path(__file__).resolve().parents[1]
# The real traces (README, "Tests on the real traces"): ../shared/traces beside the checkout, as
# CI has them, or wherever AUTOSCHED_TRACES says.
SHARED_TRACES = Path(os.environ.get("AUTOSCHED_TRACES") or REPO.parent / "shared" / "traces")
FIXTURES = Path(__file__).resolve().parent / "fixtures"
NO_TRACES = f"the real traces are not in {SHARED_TRACES}"


def script_module(relpath: str) -> ModuleType:
    """A script of the checkout (benchmarks/NAME.py, scripts/NAME.py) imported as a module, under
    its file name (its dataclasses look their module up in sys.modules)."""
    path = REPO / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The real traces (CI has them beside the checkout); a test that needs them skips without."""
    if not SHARED_TRACES.exists():
        pytest.skip(NO_TRACES)
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


# -- one summary of the tests skipped for want of the real traces ----------------------------------

_NO_TRACE_SKIPS: list[str] = []  # node ids (this process; on xdist, the controller sees them all)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple) and NO_TRACES in str(report.longrepr[2]):
        _NO_TRACE_SKIPS.append(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _NO_TRACE_SKIPS:
        return
    by_file: dict[str, int] = {}
    for nodeid in _NO_TRACE_SKIPS:
        name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        by_file[name] = by_file.get(name, 0) + 1
    files = ", ".join(f"{name} ({n})" for name, n in sorted(by_file.items()))
    terminalreporter.write_sep("-", "real-data tests skipped")
    terminalreporter.write_line(
        f"{len(_NO_TRACE_SKIPS)} test(s) need the real traces and were skipped because {NO_TRACES}: {files}. "
        "To run them, put the traces beside the checkout as ../shared/traces or set AUTOSCHED_TRACES "
        "(README, \"Tests on the real traces\").")
