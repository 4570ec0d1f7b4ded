"""What a trace holds, in numbers: jobs, span, GPU-hours, offered load, size and duration mix,
per virtual cluster. ``autosched trace inspect`` renders a `TraceSummary`; other code can reuse it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from .table import Trace

# [lower, upper) edges; the label says what a person reads
SIZE_EDGES = (1, 2, 3, 5, 9, 17, 33, 65)
SIZE_LABELS = ("1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", ">64")
DURATION_EDGES = (0, 60, 600, 3600, 6 * 3600, 86400)
DURATION_LABELS = ("<1m", "1-10m", "10m-1h", "1-6h", "6-24h", ">1d")


@dataclass(frozen=True)
class Bucket:
    """Jobs in one bucket of a mix, and their share of jobs and of GPU-hours."""

    label: str
    jobs: int
    job_share: float
    gpu_hours: float
    gpu_hour_share: float


@dataclass(frozen=True)
class VCSummary:
    vc: str
    jobs: int
    gpu_hours: float
    share: float  # of the trace's GPU-hours
    gpus: int | None  # the VC's GPUs in the cluster spec; None when the spec has no such VC
    offered_load: float | None  # GPU-seconds / (VC GPUs x trace span)


@dataclass(frozen=True)
class TraceSummary:
    source: str
    jobs: int
    first_submit: float  # s
    last_submit: float  # s
    span_days: float  # last submit - first submit
    gpu_hours: float
    max_gpus: int
    mean_duration: float  # s
    median_duration: float  # s
    users: int | None  # distinct users; None when the trace has no user column
    cluster: str | None
    cluster_gpus: int | None
    offered_load: float | None  # GPU-seconds / (cluster GPUs x span); None without a cluster or span
    sizes: tuple[Bucket, ...]
    durations: tuple[Bucket, ...]
    vcs: tuple[VCSummary, ...]  # by GPU-hours, largest first; empty when the trace has no vc column
    statuses: tuple[tuple[str, int], ...]  # (status, jobs); empty when the trace has no status column

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(trace: Trace, *, cluster: str | None = None, cluster_gpus: int | None = None,
              vc_gpus: Mapping[str, int] | None = None) -> TraceSummary:
    """Summarise `trace` as given. The cluster comes as plain values (this layer sits below the
    cluster's): `cluster` a label to show, `cluster_gpus` its GPUs, against which offered load is
    computed, and `vc_gpus` each VC's GPUs, against which each VC's load is (none: no per-VC load).
    Jobs the cluster cannot run are counted too: call `autosched.cluster.fit_to_cluster` first to
    leave them out."""
    gpu_s = trace.num_gpus.astype(np.float64) * trace.duration
    span = trace.end - trace.start
    return TraceSummary(
        source=trace.source,
        jobs=len(trace),
        first_submit=trace.start,
        last_submit=trace.end,
        span_days=span / 86400,
        gpu_hours=float(gpu_s.sum()) / 3600,
        max_gpus=int(trace.num_gpus.max()) if len(trace) else 0,
        mean_duration=float(trace.duration.mean()) if len(trace) else 0.0,
        median_duration=float(np.median(trace.duration)) if len(trace) else 0.0,
        users=len(set(trace.user.tolist())) if trace.user is not None else None,
        cluster=cluster,
        cluster_gpus=cluster_gpus,
        offered_load=_load(float(gpu_s.sum()), cluster_gpus, span),
        sizes=_mix(trace.num_gpus, SIZE_EDGES, SIZE_LABELS, gpu_s),
        durations=_mix(trace.duration, DURATION_EDGES, DURATION_LABELS, gpu_s),
        vcs=_vcs(trace, gpu_s, span, vc_gpus or {}),
        statuses=_counts(trace.status),
    )


def _load(gpu_seconds: float, gpus: int | None, span: float) -> float | None:
    if not gpus or span <= 0:
        return None
    return gpu_seconds / (gpus * span)


def _mix(values: np.ndarray, edges: tuple, labels: tuple, gpu_s: np.ndarray) -> tuple[Bucket, ...]:
    which = np.searchsorted(np.asarray(edges, dtype=np.float64), values, side="right") - 1
    which = np.clip(which, 0, len(labels) - 1)
    jobs = np.bincount(which, minlength=len(labels))
    gpu_h = np.bincount(which, weights=gpu_s, minlength=len(labels)) / 3600
    n, total = max(len(values), 1), float(gpu_h.sum())
    return tuple(Bucket(label, int(j), int(j) / n, float(g), float(g) / total if total else 0.0)
                 for label, j, g in zip(labels, jobs, gpu_h))


def _vcs(trace: Trace, gpu_s: np.ndarray, span: float, capacity: Mapping[str, int]) -> tuple[VCSummary, ...]:
    if trace.vc is None or not len(trace):
        return ()
    names, which = np.unique(trace.vc.astype(str), return_inverse=True)
    jobs = np.bincount(which, minlength=len(names))
    vc_gpu_s = np.bincount(which, weights=gpu_s, minlength=len(names))
    total = float(gpu_s.sum()) or 1.0
    out = [VCSummary(str(name), int(j), float(g) / 3600, float(g) / total, capacity.get(str(name)),
                     _load(float(g), capacity.get(str(name)), span))
           for name, j, g in zip(names, jobs, vc_gpu_s)]
    return tuple(sorted(out, key=lambda v: (-v.gpu_hours, v.vc)))


def _counts(column: np.ndarray | None) -> tuple[tuple[str, int], ...]:
    if column is None or not len(column):
        return ()
    names, counts = np.unique(column.astype(str), return_counts=True)
    return tuple(sorted(((str(s), int(c)) for s, c in zip(names, counts)), key=lambda x: (-x[1], x[0])))
