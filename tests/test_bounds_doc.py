"""The bounds table of docs/traces.md ("Bounds") is the one place a user reads every bound: each
bound constant in the code is in it with its value, and a new ``MAX_*``/``MIN_*`` constant fails
this test until it has a row (or is named here as internal, not a bound on what autosched reads)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import autosched

SRC = Path(autosched.__file__).parent
DOC = SRC.parents[1] / "docs" / "traces.md"


def _days(v: float) -> str:
    return f"{v / 86400:g} days"


# constant -> the text its row shows, made from the constant's value (so a changed value fails
# here until the table says it)
BOUNDS = {
    "autosched.trace.report:MAX_DURATION": lambda v: f"{v:,} s",
    "autosched.trace.report:MAX_SUBMIT_TIME": lambda v: f"{v:,} s",
    "autosched.trace.report:MAX_GPUS": lambda v: f"from 1 to {v:,}",
    "autosched.trace.report:MAX_CPUS": lambda v: f"0 to {v:,}",
    "autosched.timeparse:MAX_TIME": lambda v: f"0 to {v:,} s",
    "autosched.timeparse:MAX_LENGTH": lambda v: f"≤ {_days(v)}",
    "autosched.cluster:MAX_GPUS_PER_NODE": lambda v: f"≤ {v:,} GPUs per node",
    "autosched.cluster:MAX_CLUSTER_GPUS": lambda v: f"≤ {v:,} GPUs in all",
    "autosched.cluster:MAX_PRIORITY_TIER": lambda v: f"an integer in [0, {v:,}]",
    "autosched.trace.report:MAX_TIME_LIMIT": lambda v: f"> 0 and ≤ {v:,} s",
    "autosched.workload.base:MAX_HORIZON": lambda v: f"≤ {_days(v)}",
    "autosched.workload.base:MAX_SAMPLE_JOBS": lambda v: f"≤ {v:,} per sample",
    "autosched.workload.evaluate:MAX_ORIGINS": lambda v: f"≤ {v:,}",
    "autosched.workload.level:MAX_LEVEL_SD": lambda v: f"in [0, {v:g}]",
    "autosched.workload.level:MAX_PERSISTENCE": lambda v: f"in [0, {v:g}]",
    "autosched.adapt.config:MAX_SEED": lambda v: f"[0, {v:,}]",
    "autosched.adapt.config:MAX_SPAN": lambda v: f"> 0 and ≤ {_days(v)}",
    "autosched.live.settings:MIN_PERIOD": lambda v: f"the agent's period ≥ {v:g} s",
    "autosched.live.settings:MAX_TIMEOUT": lambda v: f"in (0, {v:,.0f}] seconds",
    "autosched.live.settings:MAX_SETTINGS_BYTES": lambda v: f"at most {v / 2**20:g} MiB",
    "autosched.service.token:MIN_LENGTH": lambda v: f"at least {v} characters",
    "autosched.live.history:MAX_HISTORY_BYTES": lambda v: f"≤ {v / 2**30:g} GiB",
    "autosched.live.history:MAX_ROW_BYTES": lambda v: f"≤ {v // 1024} KiB per row",
    "autosched.service.token:MAX_BYTES": lambda v: f"at most {v:,} bytes",
    "autosched.live.slurm:MAX_SLURM_CONF_BYTES": lambda v: f"at most {v:,} bytes",
    "autosched.live.slurm:MAX_HISTORY_OUTPUT_BYTES": lambda v: f"≤ {v / 2**30:g} GiB from `sacct`",
    "autosched.live.slurm:MAX_OUTPUT_BYTES": lambda v: f"≤ {v / 2**20:g} MiB from the others",
    "autosched.service.guard:MAX_BODY": lambda v: f"at most {v:,} bytes, refused (413)",
    "autosched.service.models:MAX_DIFF": lambda v: f"at most {v:,} characters",
    "autosched.live.audit:MAX_REASON_CHARS": lambda v: f"one line of at most {v:,} characters",
    "autosched.trace.limits:MIN_MAX_LIMIT": lambda v: f"at least {v:,} s",
    "autosched.trace.limits:MAX_MAX_LIMIT": lambda v: f"at most {v:,} s",
    "autosched.adapt.sources:MAX_TIME_SCALE": lambda v: f"in [1, {v:,}]",
}
# Constants named like bounds that bound autosched's own work, not what it reads
INTERNAL = {
    "autosched.tune.executor:MAX_ATTEMPTS",  # retries of a trial whose worker died
    "autosched.tune.screening:MIN_SAMPLES",  # trials before causal screening may run
    "autosched.tune.screening:MAX_CONDITIONING",  # the size of its conditioning sets
    "autosched.adapt.observe:MIN_EVENTS",  # finished jobs a group needs for its own estimate
    "autosched.workload.stat:MIN_WEEKLY_DAYS",  # history before stat fits day-of-week effects
    "autosched.live.store:MAX_ID",  # SQLite's largest integer: an id above it is no revision
    "autosched.trace.limits:MAX_LIMITS",  # the default maximum time limit's choices, not a bound
    "autosched.adapt.controller:MAX_ROUNDS",  # a stored memory's round count (a damaged one: dropped)
    "autosched.switchback:MAX_LOG_RATIO",  # where an interval stops being a bound: its own arithmetic
    "autosched.workload.level:MAX_RECENT_LEVEL",  # how far a few hours may scale the samples, not an input
}


def _bound_constants() -> set[str]:
    """``module:NAME`` of every module-level ``MAX_*`` or ``MIN_*`` assignment in autosched."""
    found = set()
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            found |= {f"{module}:{t.id}" for t in targets
                      if isinstance(t, ast.Name) and re.fullmatch(r"(MAX|MIN)_[A-Z_]+", t.id)}
    return found


def _table_rows() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("### Bounds\n"):]
    section = section[:section.index("\n#", 1)]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what ")]


def test_every_bound_constant_has_a_row_or_is_internal():
    found = _bound_constants()
    assert not found - BOUNDS.keys() - INTERNAL, "bound constants without a row in docs/traces.md#bounds (or "\
        f"named as internal here): {sorted(found - BOUNDS.keys() - INTERNAL)}"
    assert not (BOUNDS.keys() | INTERNAL) - found, f"gone from the code: {sorted((BOUNDS.keys() | INTERNAL) - found)}"


@pytest.mark.parametrize("constant", sorted(BOUNDS))
def test_the_table_shows_each_bound_as_the_code_has_it(constant):
    module, name = constant.split(":")
    shown = BOUNDS[constant](getattr(importlib.import_module(module), name))
    rows = _table_rows()
    assert any(shown in row for row in rows), f"no row of docs/traces.md#bounds shows {shown!r} ({constant})"


def test_the_bounds_are_one_table_of_three_columns():
    text = DOC.read_text()
    section = text[text.index("### Bounds\n"):]
    section = section[:section.index("\n#", 1)]
    lines = section.splitlines()
    table = [i for i, line in enumerate(lines) if line.startswith("|")]
    assert table == list(range(table[0], table[0] + len(table)))  # one block of rows
    assert [line for line in lines if line.startswith("|---")] == ["|---|---|---|"]
    assert all(line.count(" | ") == 2 for line in _table_rows())
