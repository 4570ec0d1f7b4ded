"""What a loader kept and dropped, and why."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..timeparse import MAX_TIME, YEAR
from .table import TraceError

MAX_GPUS = 1_000_000  # a larger GPU count is a corrupt cell (and would overflow an int64 column)
MAX_CPUS = 100_000_000  # per job; likewise
# Bounds on times, so that a corrupt cell (1e300) cannot reach the models and the simulator: no
# job in the public traces runs for more than a few months; a submit time is a time like any other
# (`timeparse.MAX_TIME`, 100 years from the trace's origin or the Unix epoch).
MAX_DURATION = YEAR
MAX_SUBMIT_TIME = MAX_TIME
MAX_TIME_LIMIT = MAX_TIME  # a job's time limit: a longer one is a corrupt cell, not a limit


@dataclass
class DropRule:
    rule: str
    column: str
    count: int = 0
    examples: list[str] = field(default_factory=list)  # "line 12 ('abc')"


@dataclass
class LoadReport:
    """Rows read, rows kept, and every dropped row counted under the rule it broke."""

    source: str
    format: str = ""
    rows: int = 0
    kept: int = 0
    # (column, rule) -> the rows dropped under it: one rule (``time is not a number``) can be
    # broken in several columns, and each is reported under its own.
    drops: dict[tuple[str, str], DropRule] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> int:
        return sum(d.count for d in self.drops.values())

    def to_dict(self) -> dict:
        """Plain data for JSON output."""
        return {"source": self.source, "format": self.format, "rows": self.rows, "kept": self.kept,
                "dropped": self.dropped,
                "drops": [{"rule": d.rule, "column": d.column, "count": d.count, "examples": list(d.examples)}
                          for d in self.drops.values()],
                "notes": list(self.notes)}

    def summary(self) -> str:
        head = f"{self.source}: read {self.rows:,} rows ({self.format}), kept {self.kept:,}"
        if not self.drops:
            lines = [head]
        else:
            lines = [head + f", dropped {self.dropped:,}:"]
            for d in self.drops.values():
                ex = "; e.g. " + ", ".join(d.examples) if d.examples else ""
                lines.append(f"  - {d.count:,} × column {d.column!r}: {d.rule}{ex}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _shown(value: object, most: int = 60) -> str:
    """A dropped cell for a message: its repr, cut to `most` characters (a cell that swallowed
    many lines would otherwise fill the report)."""
    text = repr(value)
    return text if len(text) <= most else f"{text[:most]}... ({len(str(value)):,} characters)"


class RowCheck:
    """Collects row problems while a file is parsed; in strict mode the first one is an error.

    ``where`` is what a person needs to find the row, such as ``line 12`` or ``job 'abc'``;
    ``row`` is what makes it one row (default: ``where``): a row that breaks two rules is counted
    once, under the first, and two rows with the same ``where`` (the second and third rows of a
    job id) are two.
    """

    def __init__(self, report: LoadReport, strict: bool = False):
        self.report = report
        self.strict = strict
        self._dropped: set[object] = set()

    def drop(self, where: str, column: str, rule: str, value: object = None, row: object = None) -> None:
        got = "" if value is None else f" (got {_shown(value)})"
        if self.strict:
            raise TraceError(f"{self.report.source}: {where}, column {column!r}: {rule}{got}")
        key = where if row is None else row
        if key in self._dropped:
            return
        self._dropped.add(key)
        d = self.report.drops.setdefault((column, rule), DropRule(rule, column))
        d.count += 1
        if len(d.examples) < 3:
            d.examples.append(f"{where}{got}")

    def gpus(self, where: str, column: str, text: str) -> int | None:
        """Parse a GPU count; None (after recording the drop) when unusable."""
        try:
            x = float(text)
        except (TypeError, ValueError):
            self.drop(where, column, "GPU count is not a number", text)
            return None
        if not math.isfinite(x) or x != int(x):
            self.drop(where, column, "GPU count is not a whole number", text)
            return None
        if x < 1:
            self.drop(where, column, "job requests no GPUs (must be >= 1)", text)
            return None
        if x > MAX_GPUS:
            self.drop(where, column, f"GPU count is beyond any cluster (must be <= {MAX_GPUS:,})", text)
            return None
        return int(x)

    def seconds(self, where: str, column: str, text: str, positive: bool = False) -> float | None:
        """Parse a time in seconds; durations must be positive."""
        try:
            x = float(text)
        except (TypeError, ValueError):
            self.drop(where, column, "time is not a number", text)
            return None
        if not math.isfinite(x):
            self.drop(where, column, "time is not finite", text)
            return None
        if positive and x <= 0:
            self.drop(where, column, "duration is not positive", text)
            return None
        return x
