"""Every benchmark script answers `--help`: argparse formats help texts with `%`, so a help text
that shows a percentage unescaped crashes `--help` with a TypeError instead of printing it."""

from __future__ import annotations

import contextlib
import io
import sys

import pytest

from conftest import REPO, script_module

SCRIPTS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if "ArgumentParser(" in p.read_text())


def test_the_scripts_are_found():
    assert "closed_loop.py" in SCRIPTS and len(SCRIPTS) > 10


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_usage(name, monkeypatch):
    mod = script_module(f"benchmarks/{name}")
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        mod.main()
    assert stop.value.code == 0
    assert out.getvalue().startswith("usage: ")


def test_closed_loop_help_shows_the_pick_thresholds_as_percentages(monkeypatch):
    mod = script_module("benchmarks/closed_loop.py")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        mod.main(["--help"])
    text = " ".join(out.getvalue().split())
    assert f"gains at least {mod.PICK_GAIN:.0%} over the window" in text
