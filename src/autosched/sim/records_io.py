"""Write per-job simulation records."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..atomic import atomic_path
from ..trace.table import Trace
from .engine import JobRecords


def records_columns(rec: JobRecords, trace: Trace) -> dict[str, np.ndarray]:
    cols = {
        "job_id": trace.job_id,
        "submit": rec.submit,
        "first_start": rec.first_start,
        "end": rec.end,
        "jct": rec.jct,
        "queue": rec.queue,
        "run_time": rec.run_time,
        "duration": rec.duration,
        "num_gpus": rec.gpus,
        "preemptions": rec.preemptions,
    }
    if trace.vc is not None:
        cols["vc"] = trace.vc
    if trace.time_limit is not None and rec.killed is not None:  # the trace has time limits: which jobs were ended at theirs
        cols["time_limit"] = trace.time_limit
        cols["killed_at_limit"] = rec.killed
    return cols


def write_records(rec: JobRecords, trace: Trace, path: str | os.PathLike[str]) -> None:
    """CSV, or Parquet when the name ends in .parquet; atomic, as `write_trace`."""
    path = Path(path)
    cols = records_columns(rec, trace)
    with atomic_path(path) as tmp:
        if path.suffix.lower() in (".parquet", ".pq"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({k: (v.tolist() if v.dtype == object else v) for k, v in cols.items()}), tmp)
            return
        import csv

        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(list(cols))
            w.writerows(zip(*(v.tolist() for v in cols.values())))
