"""The cluster: nodes of GPUs, optionally split into virtual clusters, and its fixed properties."""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .associations import Association, check_tree
from .atomic import check_input
from .errors import InputError
from .trace.parsing import found_columns
from .trace.report import LoadReport, RowCheck
from .trace.table import Trace

PLACEMENTS = ("consolidate", "spread", "count")
PLACEMENT_HELP = (
    "consolidate: a job that fits in one node goes on one node (best fit), larger jobs take whole "
    "free nodes; spread: first fit across nodes; count: only GPU counts, node boundaries ignored "
    "(idealised, as the Tiresias simulator's 'count' scheme)"
)


class ClusterError(InputError):
    """A cluster spec that cannot be read."""


# Bounds on a cluster, so that a typo (16x99999999999) fails at once instead of overflowing arrays
# or exhausting memory: the largest GPU clusters today have ~100k GPUs; a node has at most a few
# dozen.
MAX_GPUS_PER_NODE = 1024
MAX_CLUSTER_GPUS = 1_000_000
# Slurm's largest PriorityTier (slurm.conf(5)); above about 2**32 a tier would swamp the job
# priority in float arithmetic and change the order of jobs within a tier
MAX_PRIORITY_TIER = 65_533


# The TRES a partition's billing weights may name that the simulator counts (a job's CPUs and
# GPUs), spelled as Slurm prints them; weights of other TRES (Mem, Node, licenses) have nothing
# to weigh here.
BILLED_TRES = ("CPU", "GRES/gpu")


@dataclass(frozen=True)
class SlurmPartition:
    """A Slurm partition of a uniform cluster: its nodes (numbers from 0; partitions may share
    nodes), its ``PriorityTier`` (Slurm schedules the jobs of higher tiers first) and, when
    given, its ``TRESBillingWeights`` as (TRES, weight) pairs: the fair-share usage its jobs are
    charged per CPU- and GPU-second, in place of the policy's ``TRESBillingWeights.*`` knobs
    (empty: the knobs). A TRES the pairs do not name weighs 0, as in Slurm."""

    name: str
    nodes: tuple[int, ...]
    priority_tier: int = 1
    billing_weights: tuple[tuple[str, float], ...] = ()

    def billing_weight(self, tres: str) -> float:
        """The weight of `tres` (Slurm's TRES names ignore case); 0 when not listed."""
        return next((w for t, w in self.billing_weights if t.lower() == tres.lower()), 0.0)


def parse_billing_weights(text: str, where: str = "TRESBillingWeights") -> tuple[tuple[str, float], ...]:
    """``CPU=1.0,GRES/gpu=4.0`` (as slurm.conf and ``scontrol show partition`` spell a
    partition's TRESBillingWeights) as (TRES, weight) pairs; empty text gives none. A weight may
    carry a unit suffix (``Mem=0.25G``: per GB), which is dropped. Raises ClusterError naming
    `where` on a pair that is not TRES=number >= 0, or a TRES named twice."""
    text = text.strip().strip('"')
    if text.lower() in ("", "(null)", "none"):
        return ()
    out: list[tuple[str, float]] = []
    for item in text.split(","):
        tres, sep, value = item.strip().partition("=")
        tres = tres.strip()
        try:
            weight = float(value.strip().rstrip("KMGTPkmgtp")) if sep and tres else math.nan
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and weight >= 0):
            raise ClusterError(f"{where}: {item.strip()!r} is not TRES=WEIGHT with a weight >= 0")
        if any(t.lower() == tres.lower() for t, _ in out):
            raise ClusterError(f"{where}: TRES {tres!r} is weighted twice")
        out.append((tres, weight))
    return tuple(out)


def billing_text(weights: tuple[tuple[str, float], ...]) -> str:
    """The pairs as slurm.conf spells them (``CPU=1,GRES/gpu=4``): `parse_billing_weights`'s
    inverse."""
    return ",".join(f"{t}={w:g}" for t, w in weights)


@dataclass(frozen=True)
class SlurmClocks:
    """When a Slurm controller's periodic threads run, each given as one time (s, in the trace's
    clock) at which it ran; it runs again every period from there. slurmctld starts them when it
    starts, not at multiples of their period, so a twin of a given slurmctld needs its phases
    (benchmarks/slurm_twin.py reads them from slurmctld's log); the default, 0, puts every
    thread at multiples of its period.

    ``tick``: the background loop (about once a second, ``tick_period``) that runs the main
    scheduler after events;
    ``backfill``: the backfill cycle (every ``bf_interval``); ``decay``: the priority
    recalculation (every ``PriorityCalcPeriod``)."""

    tick: float = 0.0
    backfill: float = 0.0
    decay: float = 0.0
    # The loop sleeps a second after its work, so its period is 1 s plus that work (a few ms
    # on a busy machine: measured 1.003-1.005 s on the testbed; the phase drifts by as much).
    tick_period: float = 1.0

    @staticmethod
    def next(anchor: float, period: float, t: float) -> float:
        """The first time >= t (to a microsecond) of a thread run at `anchor` every `period`."""
        return anchor + math.ceil((t - anchor) / period - 1e-6) * period

    @staticmethod
    def last(anchor: float, period: float, t: float) -> float:
        """The last time <= t (to a microsecond) of a thread run at `anchor` every `period`."""
        return anchor + math.floor((t - anchor) / period + 1e-6) * period


@dataclass(frozen=True)
class ClusterSpec:
    """Nodes × GPUs per node, optionally split into virtual clusters (VCs).

    With VCs, each job runs only on its VC's nodes (as in the Helios and Lucid simulators); with a
    uniform spec, the trace's VCs are ignored and all jobs share one pool.
    """

    gpus_per_node: int
    vc_nodes: tuple[tuple[str, int], ...]  # (name, nodes); a uniform cluster is one unnamed pool
    uniform: bool = True
    # Properties of the cluster, not knobs: restart cost after a preemption (s) for jobs of at most
    # `overhead_cutoff` GPUs and above (Lucid's 40 s / 60 s), and the run-time factor of a job whose
    # GPUs span several nodes (1.0 = no penalty).
    restart_overhead: tuple[float, float] = (40.0, 60.0)
    overhead_cutoff: int = 8
    spread_slowdown: float = 1.0
    source: str = field(default="", compare=False)
    # Slurm's configured association tree (autosched.associations), when known: fair share then
    # counts every association in it, as slurmctld does; empty = the trace's accounts and users.
    associations: tuple[Association, ...] = ()
    clocks: SlurmClocks = SlurmClocks()
    # Slurm partitions (nodes, PriorityTier) of a uniform cluster: the multifactor policy places
    # a job (trace column 'partition') only on its partition's nodes. Empty: one partition.
    slurm_partitions: tuple[SlurmPartition, ...] = ()
    # A node's CPUs (0: as many as its GPUs), and how many CPUs a job that does not say gets per
    # GPU: Slurm's DefCpuPerGPU (None: the node shape's, CPUs / GPUs of a node; 0: DefCpuPerGPU
    # unset, one CPU per node, sbatch's one task of one CPU). Slurm's job-size factor counts a
    # job's CPUs: with one per node a 1-GPU and an 8-GPU job on one node are the same size.
    node_cpus: int = 0
    def_cpu_per_gpu: float | None = None

    def __post_init__(self) -> None:
        if self.node_cpus < 0 or not (self.def_cpu_per_gpu is None
                                      or (math.isfinite(self.def_cpu_per_gpu) and self.def_cpu_per_gpu >= 0)):
            raise ClusterError(f"a node's CPUs and DefCpuPerGPU must be >= 0 (got {self.node_cpus} and "
                               f"{self.def_cpu_per_gpu})")
        if self.associations:
            # The one check that the tree is a tree under root (fair share relies on it); a
            # listing read from a file has been checked already, naming the file.
            check_tree(self.associations, "the cluster's association tree")
        if not self.slurm_partitions:
            return
        if not self.uniform:
            raise ClusterError("Slurm partitions need a uniform cluster (NODESxGPUS), not virtual clusters")
        names = [p.name for p in self.slurm_partitions]
        for p in self.slurm_partitions:
            if names.count(p.name) > 1:
                raise ClusterError(f"Slurm partition {p.name!r} is described twice")
            if any(not (math.isfinite(w) and w >= 0) for _, w in p.billing_weights):
                raise ClusterError(f"Slurm partition {p.name!r}: billing weights must be numbers >= 0")
            if not p.nodes or min(p.nodes) < 0 or max(p.nodes) >= self.nodes:
                outside = [n for n in p.nodes if not 0 <= n < self.nodes]
                raise ClusterError(f"Slurm partition {p.name!r}: nodes must be numbers in [0, {self.nodes - 1}] "
                                   f"(got {_ranges(outside) or 'none'} outside)" if outside else
                                   f"Slurm partition {p.name!r}: it has no nodes")

    @classmethod
    def uniform_nodes(cls, nodes: int, gpus_per_node: int, **kw) -> "ClusterSpec":
        """`nodes` nodes of `gpus_per_node` GPUs in one pool (no VCs); `kw` sets the properties
        (restart overhead, spread slowdown, ...). Raises ClusterError on a size of 0 or beyond
        the bound."""
        if nodes < 1 or gpus_per_node < 1:
            raise ClusterError(f"cluster {nodes}x{gpus_per_node}: a cluster needs at least one node "
                               "with at least one GPU")
        _check_size(f"{nodes}x{gpus_per_node}", nodes, gpus_per_node)
        return cls(gpus_per_node, (("", nodes),), True, **kw)

    @property
    def nodes(self) -> int:
        """Nodes in all partitions."""
        return sum(n for _, n in self.vc_nodes)

    @property
    def gpus(self) -> int:
        """GPUs in all partitions."""
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        """One line for reports and results, e.g. ``32x8 (256 GPUs)``, with the node's CPUs and
        DefCpuPerGPU where they were given (``11x8 (88 GPUs), CPUs=40``)."""
        if self.uniform:
            text = f"{self.nodes}x{self.gpus_per_node} ({self.gpus} GPUs)"
        else:
            text = f"{len(self.vc_nodes)} VCs, {self.nodes} nodes x {self.gpus_per_node} ({self.gpus} GPUs)"
        if self.node_cpus:
            text += f", CPUs={self.node_cpus}"
        if self.def_cpu_per_gpu is not None:
            text += f", DefCpuPerGPU={self.def_cpu_per_gpu:g}"
        return text

    # -- CPUs -----------------------------------------------------------------------------------
    @property
    def cpus_per_node(self) -> int:
        """A node's CPUs (`node_cpus`, or as many as its GPUs when not given)."""
        return self.node_cpus or self.gpus_per_node

    @property
    def cpus_per_gpu(self) -> float:
        """The CPUs a job that does not say gets per GPU (0: one per node; see `job_cpus`)."""
        if self.def_cpu_per_gpu is not None:
            return float(self.def_cpu_per_gpu)
        return self.cpus_per_node / self.gpus_per_node

    def job_cpus(self, gpus: np.ndarray, cpus: np.ndarray | None) -> np.ndarray:
        """Each job's CPUs when it runs: its own count where it has one (> 0), else `cpus_per_gpu`
        x its GPUs (at least one), or one CPU per node it spans when `cpus_per_gpu` is 0. Where
        the cluster sets `def_cpu_per_gpu` (> 0), a job that asked for fewer CPUs gets that many
        per GPU all the same: sacct's request of a job that asked for GPUs alone is one CPU, and
        Slurm gives it DefCpuPerGPU's (a job that asked for fewer CPUs by hand keeps them in
        Slurm; sacct cannot tell the two apart)."""
        g, known = _counts(gpus, cpus)
        per = self.cpus_per_gpu
        given = np.maximum(np.round(g * per), 1.0) if per > 0 else np.ceil(g / self.gpus_per_node)
        if self.def_cpu_per_gpu:
            return np.where(known > 0, np.maximum(known, given), given)
        return np.where(known > 0, known, given)

    def asked_cpus(self, gpus: np.ndarray, cpus: np.ndarray | None) -> np.ndarray:
        """Each job's CPUs as it asked for them, what Slurm's TRES factor weighs while it waits:
        its own count where it has one (> 0); else, where the cluster sets `def_cpu_per_gpu`,
        sbatch's one task of one CPU per node (DefCpuPerGPU adds the rest only when the job
        starts); else, under the node shape's rule, the CPUs `job_cpus` gives it, as if it had
        asked for them."""
        if self.def_cpu_per_gpu is None:
            return self.job_cpus(gpus, cpus)
        g, known = _counts(gpus, cpus)
        return np.where(known > 0, known, np.ceil(g / self.gpus_per_node))

    def cpu_rule(self) -> str:
        """How jobs without a CPU count are sized, in words (for `trace inspect` and `run`)."""
        if self.cpus_per_gpu == 0:
            return "one CPU per node (DefCpuPerGPU=0: sbatch's one task of one CPU)"
        where = (f"DefCpuPerGPU={self.def_cpu_per_gpu:g}" if self.def_cpu_per_gpu is not None
                 else f"the node shape: {self.cpus_per_node} CPUs, {self.gpus_per_node} GPUs")
        return f"{self.cpus_per_gpu:g} CPU(s) per GPU ({where})"

    def overhead(self, gpus: int) -> float:
        """Seconds a preempted job of `gpus` GPUs pays when it resumes."""
        return self.restart_overhead[0] if gpus <= self.overhead_cutoff else self.restart_overhead[1]

    def partition_of(self, trace: Trace) -> np.ndarray:
        """Each job's partition index; -1 for a job whose VC the spec does not have."""
        if self.uniform:
            return np.zeros(len(trace), dtype=np.int64)
        if trace.vc is None:
            raise ClusterError(
                f"the cluster spec {self.source or ''} has virtual clusters but the trace has no 'vc' column; "
                "use a uniform spec such as 32x8"
            )
        index = {name: i for i, (name, _) in enumerate(self.vc_nodes)}
        return np.fromiter((index.get(v, -1) for v in trace.vc), dtype=np.int64, count=len(trace))

    def partition_gpus(self) -> list[int]:
        """GPUs of each partition (one per VC, or the one pool), in partition order."""
        return [n * self.gpus_per_node for _, n in self.vc_nodes]


_NXG = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*((?:,[^,]*)*)$")
# The node shape's settings a spec may add to NxG, as slurm.conf spells them
_NODE_KEYS = {"cpus": "CPUs", "defcpupergpu": "DefCpuPerGPU"}


def parse_cluster(spec: str, **kw) -> ClusterSpec:
    """``NxG`` (N nodes of G GPUs) or a CSV file of virtual clusters.

    ``NxG`` may go on with ``,CPUs=C`` (a node's CPUs; default G) and ``,DefCpuPerGPU=D`` (the
    CPUs a job without a CPU count gets per GPU; default C / G; 0: one CPU per node), as
    slurm.conf spells them: ``11x8,CPUs=40``.
    The file has columns ``vc`` and ``nodes`` (Philly's ``node num`` works too), and optionally
    ``gpus_per_node`` (one value for all rows; default 8, as HeliosArtifact and Lucid).
    """
    if not spec.strip():
        raise ClusterError("cluster spec is empty: give NODESxGPUS (e.g. 32x8) or a file of vc,nodes")
    m = _NXG.match(spec)
    if m:
        shape = _node_shape(spec, m.group(3))
        return ClusterSpec.uniform_nodes(int(m.group(1)), int(m.group(2)), source=spec, **shape, **kw)
    path = Path(spec)
    if not path.exists():
        raise ClusterError(f"cluster spec {spec!r} is neither NODESxGPUS (e.g. 32x8) nor an existing file")
    return _read_vc_file(path, **kw)


def _node_shape(spec: str, rest: str) -> dict[str, Any]:
    """The ``,CPUs=C,DefCpuPerGPU=D`` after ``NxG`` as ClusterSpec fields."""
    out: dict[str, Any] = {}
    for item in (i for i in rest.split(",") if i.strip()):
        key, sep, value = (x.strip() for x in item.partition("="))
        name = _NODE_KEYS.get(key.lower())
        if name is None or not sep:
            raise ClusterError(f"cluster spec {spec!r}: {item.strip()!r} is not CPUs=N or DefCpuPerGPU=N")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number >= 0) or (name == "CPUs" and (number < 1 or number != int(number))):
            raise ClusterError(f"cluster spec {spec!r}: {name}={value} must be a number >= 0 "
                               "(CPUs: a whole number >= 1)")
        out["node_cpus" if name == "CPUs" else "def_cpu_per_gpu"] = int(number) if name == "CPUs" else number
    return out


def _read_vc_file(path: Path, **kw) -> ClusterSpec:
    if path.is_dir():
        raise ClusterError(f"{path}: is a directory, not a cluster file (vc,nodes)")
    try:
        check_input(path, "CSV of vc,nodes")  # a FIFO would block
    except InputError as e:
        raise ClusterError(str(e)) from None
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        raise ClusterError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start}); expected a CSV of vc,nodes") from None
    except csv.Error as e:
        raise ClusterError(f"{path}: malformed CSV ({e}); expected a CSV of vc,nodes") from None
    except OSError as e:
        raise ClusterError(f"{path}: cannot read the cluster file ({e.strerror or e})") from None
    if not rows:
        raise ClusterError(f"{path}: empty cluster file")
    header = [c.strip().lower() for c in rows[0]]
    nodes_col = next((c for c in ("nodes", "node num", "node_num") if c in header), None)
    if "vc" not in header or nodes_col is None:
        raise ClusterError(f"{path}: line 1: need columns 'vc' and 'nodes' (or 'node num'); found {found_columns(header)}")
    iv, inn = header.index("vc"), header.index(nodes_col)
    ig = header.index("gpus_per_node") if "gpus_per_node" in header else None
    vcs: list[tuple[str, int]] = []
    gpn_seen: set[int] = set()
    for line, r in enumerate(rows[1:], start=2):
        if not r or not any(c.strip() for c in r):
            continue
        try:
            n = int(r[inn])
        except (ValueError, IndexError):
            raise ClusterError(f"{path}: line {line}, column {nodes_col!r}: node count is not an integer") from None
        if n < 1:
            raise ClusterError(f"{path}: line {line}, column {nodes_col!r}: a VC needs at least one node (got {n})")
        if iv >= len(r):
            raise ClusterError(f"{path}: line {line}, column 'vc': missing cell (the row has {len(r)} of "
                               f"{len(header)} columns)")
        name = r[iv].strip()
        if name in dict(vcs):
            raise ClusterError(f"{path}: line {line}, column 'vc': VC {name!r} appears twice")
        vcs.append((name, n))
        if ig is not None:
            try:
                gpn_seen.add(int(r[ig]))
            except (ValueError, IndexError):
                raise ClusterError(f"{path}: line {line}, column 'gpus_per_node': not an integer") from None
    if not vcs:
        raise ClusterError(f"{path}: no virtual clusters listed")
    if len(gpn_seen) > 1:
        raise ClusterError(f"{path}: column 'gpus_per_node': all VCs must have the same GPUs per node")
    gpn = gpn_seen.pop() if gpn_seen else 8
    if gpn < 1:
        raise ClusterError(f"{path}: column 'gpus_per_node' must be >= 1")
    _check_size(str(path), sum(n for _, n in vcs), gpn)
    return ClusterSpec(gpn, tuple(vcs), False, source=str(path), **kw)


def read_slurm_partitions(path: Path | str) -> tuple[SlurmPartition, ...]:
    """Slurm partitions from a CSV with columns ``partition``, ``nodes`` (node numbers from 0,
    as ``0-3,6``) and optionally ``priority_tier`` (default 1) and ``billing_weights`` (the
    partition's TRESBillingWeights, quoted: ``"CPU=1.0,GRES/gpu=4.0"``; empty: the policy's
    knobs), one partition a line. A job without a partition goes to the first (list Slurm's
    ``Default=YES`` partition first)."""
    path = Path(path)
    try:
        check_input(path, "CSV of partition,nodes,priority_tier")
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ClusterError(f"{path}: cannot read the partition file ({e})") from None
    if not rows:
        raise ClusterError(f"{path}: empty partition file")
    header = [c.strip().lower() for c in rows[0]]
    if "partition" not in header or "nodes" not in header:
        raise ClusterError(f"{path}: line 1: need columns 'partition' and 'nodes'; found {found_columns(header)}")
    ip, inodes = header.index("partition"), header.index("nodes")
    it = header.index("priority_tier") if "priority_tier" in header else None
    ib = header.index("billing_weights") if "billing_weights" in header else None
    out = []
    for line, r in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in r):
            continue
        try:
            nodes: list[int] = []
            for part in r[inodes].split(","):
                a, _, b = part.strip().partition("-")
                nodes.extend(range(int(a), int(b or a) + 1))
        except (ValueError, IndexError):
            raise ClusterError(f"{path}: line {line}, column 'nodes': not node numbers such as 0-3,6") from None
        try:
            tier = int(r[it]) if it is not None and r[it].strip() else 1
        except (ValueError, IndexError):
            raise ClusterError(f"{path}: line {line}, column 'priority_tier': not an integer") from None
        if not 0 <= tier <= MAX_PRIORITY_TIER:
            raise ClusterError(f"{path}: line {line}, column 'priority_tier': must be in "
                               f"[0, {MAX_PRIORITY_TIER:,}], as Slurm's PriorityTier (got {tier})")
        billing = parse_billing_weights(r[ib] if ib is not None and ib < len(r) else "",
                                        f"{path}: line {line}, column 'billing_weights'")
        out.append(SlurmPartition(r[ip].strip(), tuple(sorted(set(nodes))), tier, billing))
    if not out:
        raise ClusterError(f"{path}: no partitions listed")
    return tuple(out)


def _check_size(what: str, nodes: int, gpus_per_node: int) -> None:
    if gpus_per_node > MAX_GPUS_PER_NODE:
        raise ClusterError(f"{what}: {gpus_per_node:,} GPUs per node is beyond any machine (must be <= {MAX_GPUS_PER_NODE:,})")
    if nodes * gpus_per_node > MAX_CLUSTER_GPUS:
        raise ClusterError(f"{what}: {nodes * gpus_per_node:,} GPUs is beyond any cluster (must be <= {MAX_CLUSTER_GPUS:,})")


def cpu_sizing(trace: Trace, cluster: ClusterSpec) -> dict[str, Any]:
    """How the jobs of `trace` are sized in CPUs on `cluster` (what ``trace inspect --cluster``
    and ``run --json`` state): how many carry their own CPU count, how many are given one by
    the cluster's rule (`ClusterSpec.job_cpus`), the rule in words, and its figures."""
    own = 0 if trace.num_cpus is None else int((np.asarray(trace.num_cpus) > 0).sum())
    return {"jobs_with_cpus": own, "jobs_given_cpus": len(trace) - own, "rule": cluster.cpu_rule(),
            "cpus_per_gpu": cluster.cpus_per_gpu, "cpus_per_node": cluster.cpus_per_node}


def cpu_sizing_text(sizing: dict[str, Any]) -> str:
    """`cpu_sizing` in one line: ``none in the trace: each job gets 1 CPU(s) per GPU (...)``."""
    own, given = sizing["jobs_with_cpus"], sizing["jobs_given_cpus"]
    if not given:
        return f"from the trace (every job, {own:,})"
    head = "none in the trace: each job gets" if not own else f"from the trace for {own:,} jobs; the {given:,} others get"
    return f"{head} {sizing['rule']}"


def fit_to_cluster(trace: Trace, cluster: ClusterSpec, strict: bool = False,
                   report: LoadReport | None = None) -> tuple[Trace, LoadReport]:
    """Drop (and count) jobs the cluster can never run: unknown VC, or more GPUs than the partition."""
    report = report or LoadReport(source=trace.source or "trace", format="", rows=len(trace), kept=len(trace))
    check = RowCheck(report, strict)
    part = cluster.partition_of(trace)
    cap = np.asarray(cluster.partition_gpus())
    unknown = part < 0
    too_big = ~unknown & (trace.num_gpus > cap[np.maximum(part, 0)])
    for i in np.flatnonzero(unknown | too_big):
        where = f"job {trace.job_id[i]!r}"
        if unknown[i]:
            assert trace.vc is not None  # partition_of: only a job with a VC can miss the spec
            check.drop(where, "vc", f"VC is not in the cluster spec {cluster.source}", trace.vc[i])
        else:
            check.drop(where, "num_gpus",
                       f"job needs more GPUs than its partition has ({cap[part[i]]})", int(trace.num_gpus[i]))
    bad = unknown | too_big
    if bad.any():
        trace = trace.take(~bad)
    report.kept = len(trace)
    return trace, report


def _ranges(numbers: list[int]) -> str:
    """Sorted numbers as ranges, as a nodes cell writes them: [0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and n == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


def _counts(gpus: np.ndarray, cpus: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Jobs' GPUs and known CPU counts as floats (a count of 0, or no column: not known)."""
    g = np.asarray(gpus, dtype=float)
    return g, np.zeros(len(g)) if cpus is None else np.asarray(cpus, dtype=float)
