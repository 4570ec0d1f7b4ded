"""The canonical job table."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

REQUIRED = ("job_id", "submit_time", "num_gpus", "duration")
OPTIONAL = ("user", "vc", "status", "num_cpus", "name", "time_limit", "account", "partition", "attained", "age")
# A job's history before its row's submit_time (see `Trace`): seconds >= 0, absent = 0.
HISTORY = ("attained", "age")
COLUMNS = REQUIRED + OPTIONAL
# Columns held as text (object arrays of str); the rest are numbers.
TEXT_COLUMNS = frozenset({"job_id", "user", "vc", "status", "name", "account", "partition"})


class TraceError(InputError):
    """Input that cannot become a Trace. The message names file, row, column and rule."""


@dataclass(frozen=True)
class Trace:
    """An immutable, columnar job table sorted by submit time.

    Times are seconds (float). ``duration`` is the run time at the requested GPUs. Optional
    columns are ``None`` when the source does not have them.
    """

    job_id: np.ndarray
    submit_time: np.ndarray
    num_gpus: np.ndarray
    duration: np.ndarray
    user: np.ndarray | None = None
    vc: np.ndarray | None = None
    status: np.ndarray | None = None
    num_cpus: np.ndarray | None = None
    name: np.ndarray | None = None
    # The job's time limit (s) as the scheduler knew it; NaN = none (Slurm's UNLIMITED). A job
    # never runs past it (see `Simulator`), and Slurm's backfill plans with it.
    time_limit: np.ndarray | None = None
    # Slurm's account (the fair-share tree is account -> user).
    account: np.ndarray | None = None
    # Slurm's partition: with a cluster that describes Slurm partitions (their nodes and
    # PriorityTier), a job runs only on its partition's nodes.
    partition: np.ndarray | None = None
    # The job's history before `submit_time`, for a job that existed before the trace starts it
    # (the backlog an adaptive controller re-submits at its decision time): `attained` is the
    # GPU-seconds of service it already received (least-attained-service policies such as
    # Tiresias rank it by them), `age` the seconds it already existed (Slurm's age factor and
    # submission order count from ``submit_time - age``). Absent = 0. Metrics ignore both: a
    # job's JCT is still its end minus its row's `submit_time`.
    attained: np.ndarray | None = None
    age: np.ndarray | None = None
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        n = len(self.job_id)
        for col in COLUMNS:
            arr = getattr(self, col)
            if arr is None:
                continue
            if len(arr) != n:
                raise TraceError(f"{self.source or 'trace'}: column {col!r} has {len(arr)} rows, job_id has {n}")
            arr.flags.writeable = False
        if n and np.any(np.diff(self.submit_time) < 0):
            raise TraceError(f"{self.source or 'trace'}: rows are not sorted by submit_time")
        for col in HISTORY:
            arr = getattr(self, col)
            if arr is not None:
                bad = np.flatnonzero(~(np.isfinite(arr) & (arr >= 0)))
                if len(bad):
                    raise TraceError(f"{self.source or 'trace'}: row {bad[0]}, column {col!r}: "
                                     f"{float(arr[bad[0]]):g} is not a finite number of seconds >= 0")

    @classmethod
    def from_columns(cls, columns: Mapping[str, Sequence | np.ndarray], source: str = "") -> "Trace":
        """Build a trace from plain columns, sorting by submit time (stable); with an `age`
        column, jobs submitted at the same time are in order of ``submit_time - age`` (the
        older first: a policy that orders by submission reads the row order)."""
        missing = [c for c in REQUIRED if c not in columns]
        if missing:
            raise TraceError(f"{source or 'trace'}: missing required column(s) {', '.join(missing)}")
        unknown = [c for c in columns if c not in COLUMNS]
        if unknown:
            raise TraceError(f"{source or 'trace'}: unknown column(s) {', '.join(unknown)}")
        arrays = {c: _as_array(c, v, source) for c, v in columns.items() if v is not None}
        if "age" in arrays:  # (lexsort is stable: ties keep the given order, as argsort does)
            order = np.lexsort((arrays["submit_time"] - arrays["age"], arrays["submit_time"]))
        else:
            order = np.argsort(arrays["submit_time"], kind="stable")
        if np.any(order != np.arange(len(order))):
            arrays = {c: a[order] for c, a in arrays.items()}
        return cls(**arrays, source=source)

    def __len__(self) -> int:
        return len(self.job_id)

    def columns(self) -> dict[str, np.ndarray]:
        """The present columns, in canonical order."""
        return {c: getattr(self, c) for c in COLUMNS if getattr(self, c) is not None}

    def take(self, index: np.ndarray) -> "Trace":
        """Rows selected by a boolean mask or increasing integer index (order is kept)."""
        return Trace(**{c: a[index] for c, a in self.columns().items()}, source=self.source)

    def window(self, start: float, end: float) -> "Trace":
        """Jobs submitted in [start, end)."""
        lo, hi = np.searchsorted(self.submit_time, [start, end], side="left")
        return self.take(np.arange(lo, hi))

    def shifted(self, dt: float) -> "Trace":
        """The same jobs submitted `dt` seconds later (e.g. -trace.start: a slice from time 0)."""
        cols = self.columns()
        cols["submit_time"] = self.submit_time + dt
        return Trace(**cols, source=self.source)

    def stretched(self, factor: float, origin: float) -> "Trace":
        """The same jobs on a clock `factor` times slower: every length of time (run time, time
        limit, service received, age) times `factor`, and submit times `factor` times as far
        from `origin` (factor 1/N undoes factor N; a trace replayed N times faster, seen at its
        own pace)."""
        if not (math.isfinite(factor) and factor > 0):
            raise TraceError(f"{self.source or 'trace'}: a time factor must be a finite number > 0 (got {factor:g})")
        cols = self.columns()
        cols["submit_time"] = origin + (self.submit_time - origin) * factor
        for col in ("duration", "time_limit", "attained", "age"):
            if col in cols:
                cols[col] = cols[col] * factor
        return Trace(**cols, source=self.source)

    def replace(self, **columns: np.ndarray | None) -> "Trace":
        """A copy with some columns replaced (None drops an optional one); rows are re-sorted by
        submit time if the new times need it."""
        cols: dict = self.columns()
        cols.update(columns)
        return Trace.from_columns(cols, source=self.source)

    @property
    def start(self) -> float:
        """The first submit time (0 for an empty trace)."""
        return float(self.submit_time[0]) if len(self) else 0.0

    @property
    def end(self) -> float:
        """The last submit time (0 for an empty trace); jobs may run past it."""
        return float(self.submit_time[-1]) if len(self) else 0.0

    def equals(self, other: "Trace") -> bool:
        """Same columns with the same values, row for row (``==`` is not defined on arrays; in a
        float column NaN equals NaN, e.g. a missing time limit)."""
        mine, theirs = self.columns(), other.columns()
        return mine.keys() == theirs.keys() and all(
            a.dtype.kind == b.dtype.kind and np.array_equal(a, b, equal_nan=a.dtype.kind == "f") for a, b in
            ((mine[c], theirs[c]) for c in mine))

    def gpu_seconds(self) -> float:
        """The work the trace asks for: GPUs x duration summed over its jobs (its offered load
        is this over the cluster's GPUs and the trace's span)."""
        return float(np.dot(self.num_gpus.astype(np.float64), self.duration))


def _as_array(col: str, values, source: str = "") -> np.ndarray:
    if col in TEXT_COLUMNS:
        return np.asarray(values, dtype=object).astype(str).astype(object)
    if col in ("num_gpus", "num_cpus"):
        return np.asarray(values, dtype=np.int64)
    if col == "time_limit":  # text cells from CSV: empty means no limit
        return np.asarray([math.nan if isinstance(v, str) and not v.strip() else v for v in values],
                          dtype=np.float64)
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):  # e.g. a text cell from CSV: name the first one
        row, cell = next(((i, v) for i, v in enumerate(values) if not _is_number(v)), (0, ""))
        raise TraceError(f"{source or 'trace'}: row {row}, column {col!r}: {cell!r} is not a number") from None


def _is_number(v) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True
