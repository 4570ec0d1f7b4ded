"""The agent's twin of a live cluster: what the simulator models of it.

A connector reads the cluster's setup (`Connector.setup`) into a `ClusterSetup`: its GPU nodes,
its partitions (nodes, ``PriorityTier``, ``TRESBillingWeights``), the association tree with its
shares, ``PriorityFlags``, and what the twin leaves out (the QOS factor, flags it does not
model). From it come the `ClusterSpec` the tuner simulates (`ClusterSetup.cluster_spec`, the same
spec ``autosched simulate --slurm-assoc … --slurm-partitions …`` builds from the same listings),
the values of the policy's knobs that the cluster fixes (`ClusterSetup.pinned`), and the jobs of
the history the twin can place (`twin_jobs`). `setup_changes` says, without side effects, what
changed between two setups (a new account, new shares), for a round's record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..associations import Association
from ..cluster import BILLED_TRES, ClusterSpec, SlurmPartition, billing_text
from ..jsonable import jsonable
from ..policies.multifactor import CLASSIC, CPU_BILL, FAIR_TREE, GPU_BILL
from .errors import LiveError
from .history import LiveJobs, take_jobs
from .knobs import LiveSpace, live_space

# the optional trace columns `trace_columns` counts (the ones the twin's Slurm model reads)
TRACE_COLUMNS = ("time_limit", "user", "account", "partition")


@dataclass(frozen=True)
class PartitionSetup:
    """One partition as the twin models it: its GPU nodes (by name, in the cluster's node order),
    ``PriorityTier``, its billing weights as Slurm bills its jobs (TRES -> weight; a partition
    without ``TRESBillingWeights`` bills CPUs: ``CPU=1``), ``PriorityJobFactor``, and whether it
    is the default partition (``Default=YES``)."""

    name: str
    nodes: tuple[str, ...]
    priority_tier: int = 1
    billing_weights: tuple[tuple[str, float], ...] = (("CPU", 1.0),)
    job_factor: int = 1
    default: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": list(self.nodes), "priority_tier": self.priority_tier,
                "billing_weights": dict(self.billing_weights), "job_factor": self.job_factor,
                "default": self.default}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PartitionSetup":
        return cls(str(d["name"]), tuple(str(n) for n in d["nodes"]), int(d.get("priority_tier", 1)),
                   tuple((str(k), float(v)) for k, v in dict(d.get("billing_weights") or {}).items()),
                   int(d.get("job_factor", 1)), bool(d.get("default", False)))


@dataclass(frozen=True)
class ClusterSetup:
    """What the twin models of a live cluster (see the module doc).

    ``nodes``: the GPU nodes as (name, GPUs), in the cluster's order (node numbers in the
    `ClusterSpec` count from 0 in this order). ``partitions``: empty means one pool whose jobs are
    billed by the policy's ``TRESBillingWeights.*`` knobs. ``associations``: empty means fair
    share over the trace's accounts and users with equal shares. ``qos``: (name, priority) of
    each QOS; ``weights``: the priority weights of factors the twin does not model
    (``PriorityWeightQOS``, ``PriorityWeightPartition``, ``PriorityWeightAssoc``), for the
    warnings. ``notes``: what reading the cluster found that the twin leaves out."""

    nodes: tuple[tuple[str, int], ...]
    partitions: tuple[PartitionSetup, ...] = ()
    associations: tuple[Association, ...] = ()
    priority_flags: tuple[str, ...] = ()
    qos: tuple[tuple[str, int], ...] = ()
    weights: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = ()
    source: str = field(default="", compare=False)
    # What sizes a job as Slurm sizes it: a GPU node's CPUs and memory (MB; the most common; 0:
    # not known), and the CPUs and memory (MB) a job that does not ask gets per GPU (slurm.conf's
    # DefCpuPerGPU and DefMemPerGPU, `JobDefaults`; None: not set). Slurm's job-size factor counts
    # CPUs: without DefCpuPerGPU a job that asks for none gets one (one task).
    cpus: int = 0
    memory: int = 0
    def_cpu_per_gpu: float | None = None
    def_mem_per_gpu: float | None = None

    def __post_init__(self) -> None:
        if not self.nodes or any(g < 1 for _, g in self.nodes):
            raise LiveError(f"{self.source or 'cluster setup'}: no node has GPUs (Gres=gpu:N)")
        known = {n for n, _ in self.nodes}
        for p in self.partitions:
            stray = [n for n in p.nodes if n not in known]
            if stray or not p.nodes:
                raise LiveError(f"{self.source or 'cluster setup'}: partition {p.name!r} has no GPU "
                                f"nodes of the cluster ({', '.join(stray) or 'none'})")

    # -- what the simulator gets --------------------------------------------------------------
    @property
    def gpus_per_node(self) -> int:
        """The most common GPU count of a node (the simulator gives every node the same)."""
        return Counter(g for _, g in self.nodes).most_common(1)[0][0]

    def ordered_partitions(self) -> tuple[PartitionSetup, ...]:
        """The partitions, the default one first (a job without a partition goes to the first),
        the others in the cluster's order."""
        return tuple(sorted(self.partitions, key=lambda p: not p.default))

    def cluster_spec(self) -> ClusterSpec:
        """The cluster as the simulator models it: every GPU node, the partitions with their node
        numbers, tiers and billing, and the association tree."""
        index = {name: i for i, (name, _) in enumerate(self.nodes)}
        parts = tuple(SlurmPartition(p.name, tuple(sorted(index[n] for n in p.nodes)),
                                     p.priority_tier, p.billing_weights)
                      for p in self.ordered_partitions())
        return ClusterSpec.uniform_nodes(len(self.nodes), self.gpus_per_node, source=self.source,
                                         associations=self.associations, slurm_partitions=parts,
                                         node_cpus=self.cpus, def_cpu_per_gpu=self._def_cpu_per_gpu())

    def _def_cpu_per_gpu(self) -> float | None:
        """The CPUs a job that asks for none gets per GPU in the twin: DefCpuPerGPU; unset on a
        cluster whose nodes were read (Slurm gives such a job one CPU, one task: 0, one per
        node); None, the simulator's node-shape rule, when nothing of the nodes is known (the
        fake connector's setup)."""
        if self.def_cpu_per_gpu is not None:
            return self.def_cpu_per_gpu
        return 0.0 if self.cpus else None

    def pinned(self, names: Iterable[str]) -> dict[str, Any]:
        """Values of the knobs in `names` (a policy's fixed knobs in live mode) that the cluster
        fixes: ``PriorityFlags``, Fair Tree unless the cluster sets ``NO_FAIR_TREE``."""
        out: dict[str, Any] = {}
        if "PriorityFlags" in set(names):
            out["PriorityFlags"] = CLASSIC if CLASSIC in self.priority_flags else FAIR_TREE
        return out

    def unused_knobs(self, names: Iterable[str]) -> tuple[str, ...]:
        """The knobs in `names` (a policy's fixed knobs in live mode) that the twin of this
        cluster never reads: the billing knobs (``TRESBillingWeights.*``) when every partition
        bills its jobs by its own weights, as a Slurm connector's partitions always do (the
        simulator falls back on the knobs only for a job of a partition without them)."""
        if not self.partitions or not all(p.billing_weights for p in self.partitions):
            return ()
        return tuple(n for n in names if n in (GPU_BILL, CPU_BILL))

    # -- what it leaves out --------------------------------------------------------------------
    def warnings(self) -> list[str]:
        """What the twin leaves out of this cluster, one line each (``agent twin``, and for
        ``init`` and ``status`` to show): the reader's notes, the QOS and partition factors when
        their weight is not 0 and they differ between jobs, and flags it does not model."""
        out = list(self.notes)
        w = dict(self.weights)
        prios = sorted({p for _, p in self.qos})
        if w.get("PriorityWeightQOS", 0) and len(prios) > 1:
            listed = ", ".join(f"{n}={p}" for n, p in self.qos)
            out.append(f"the twin leaves out the QOS factor: PriorityWeightQOS="
                       f"{w['PriorityWeightQOS']} and the QOS priorities differ ({listed}); jobs of "
                       "a higher-priority QOS start earlier on the cluster than in the twin")
        factors = sorted({p.job_factor for p in self.partitions})
        if w.get("PriorityWeightPartition", 0) and len(factors) > 1:
            listed = ", ".join(f"{p.name}={p.job_factor}" for p in self.partitions)
            out.append("the twin leaves out the partition factor: PriorityWeightPartition="
                       f"{w['PriorityWeightPartition']} and PriorityJobFactor differs ({listed})")
        if w.get("PriorityWeightAssoc", 0):
            out.append(f"the twin leaves out the association factor (PriorityWeightAssoc="
                       f"{w['PriorityWeightAssoc']})")
        other = [f for f in self.priority_flags if f not in (FAIR_TREE, CLASSIC)]
        if other:
            out.append(f"the twin does not model PriorityFlags {','.join(other)}")
        gpus = sorted({g for _, g in self.nodes})
        if len(gpus) > 1:
            out.append(f"nodes have {gpus[0]} to {gpus[-1]} GPUs; the twin gives every node "
                       f"{self.gpus_per_node} (the most common count)")
        out += self._sizing_warnings()
        return out

    def _sizing_warnings(self) -> list[str]:
        """Where a node's CPUs or memory, not its GPUs, bound how many default-sized jobs it
        runs (the twin places by GPUs alone)."""
        out = []
        g = self.gpus_per_node
        if self.def_cpu_per_gpu and self.cpus and self.def_cpu_per_gpu * g > self.cpus:
            out.append(f"DefCpuPerGPU={self.def_cpu_per_gpu:g} asks {self.def_cpu_per_gpu * g:g} CPUs for a node's "
                       f"{g} GPUs, which has {self.cpus}: Slurm fills a node's CPUs before its GPUs, the twin "
                       "places by GPUs alone")
        if self.def_mem_per_gpu and self.memory and self.def_mem_per_gpu * g > self.memory:
            out.append(f"DefMemPerGPU={self.def_mem_per_gpu:g} MB asks {self.def_mem_per_gpu * g:g} MB for a "
                       f"node's {g} GPUs, which has {self.memory} MB: memory, not GPUs, bounds how many jobs "
                       "a node runs in Slurm; the twin places by GPUs alone")
        return out

    # -- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON of the setup (`from_dict` reads it back), as a round records it."""
        return jsonable({
            "nodes": [{"name": n, "gpus": g} for n, g in self.nodes],
            "partitions": [p.to_dict() for p in self.partitions],
            "associations": [association_dict(a) for a in self.associations],
            "priority_flags": list(self.priority_flags),
            "qos": [{"name": n, "priority": p} for n, p in self.qos],
            "weights": dict(self.weights), "notes": list(self.notes), "source": self.source,
            "cpus": self.cpus, "memory": self.memory, "def_cpu_per_gpu": self.def_cpu_per_gpu,
            "def_mem_per_gpu": self.def_mem_per_gpu})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ClusterSetup":
        """The setup `to_dict` wrote; `LiveError` when `d` is not one."""
        try:
            return cls(
                nodes=tuple((str(n["name"]), int(n["gpus"])) for n in d["nodes"]),
                partitions=tuple(PartitionSetup.from_dict(p) for p in d.get("partitions") or ()),
                associations=tuple(Association(str(a["account"]), str(a.get("user") or ""),
                                               str(a.get("parent") or ""), int(a["shares"]))
                                   for a in d.get("associations") or ()),
                priority_flags=tuple(str(f) for f in d.get("priority_flags") or ()),
                qos=tuple((str(q["name"]), int(q["priority"])) for q in d.get("qos") or ()),
                weights=tuple((str(k), int(v)) for k, v in dict(d.get("weights") or {}).items()),
                notes=tuple(str(n) for n in d.get("notes") or ()), source=str(d.get("source", "")),
                # (a setup a round recorded before the twin read them has none)
                cpus=int(d.get("cpus") or 0), memory=int(d.get("memory") or 0),
                def_cpu_per_gpu=_number(d.get("def_cpu_per_gpu")),
                def_mem_per_gpu=_number(d.get("def_mem_per_gpu")))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise LiveError(f"not a cluster setup ({type(e).__name__}: {e})") from None


def _number(x: Any) -> float | None:
    return None if x is None else float(x)


def association_dict(a: Association) -> dict[str, Any]:
    """An association as the twin's JSON shows it: ``user`` null for an account, ``parent`` the
    parent account of an account and the account of a user."""
    return {"account": a.account, "user": a.user or None, "parent": a.parent or None,
            "shares": a.shares}


# -- what changed ---------------------------------------------------------------------------------

def setup_changes(old: ClusterSetup | None, new: ClusterSetup) -> list[str]:
    """What changed from `old` to `new`, one line per change, in a fixed order (nodes, partitions,
    associations, flags, QOS, weights); empty when nothing did or there is no `old`. Pure."""
    if old is None:
        return []
    out: list[str] = []
    out += _keyed("node", dict(old.nodes), dict(new.nodes), lambda a, b: [f"GPUs {a} -> {b}"])
    out += _keyed("partition", {p.name: p for p in old.partitions},
                  {p.name: p for p in new.partitions}, _partition_diff)
    out += _keyed("account", {a.account: a for a in old.associations if not a.user},
                  {a.account: a for a in new.associations if not a.user}, _assoc_diff)
    out += _keyed("user", {f"{a.user} in {a.account}": a for a in old.associations if a.user},
                  {f"{a.user} in {a.account}": a for a in new.associations if a.user}, _assoc_diff)
    if set(old.priority_flags) != set(new.priority_flags):
        out.append(f"PriorityFlags {','.join(old.priority_flags) or '(none)'} -> "
                   f"{','.join(new.priority_flags) or '(none)'}")
    out += _keyed("QOS", dict(old.qos), dict(new.qos), lambda a, b: [f"priority {a} -> {b}"])
    out += [f"{k} {a} -> {b}" for k, (a, b) in _changed(dict(old.weights), dict(new.weights))]
    return out


def _keyed(kind: str, old: Mapping[str, Any], new: Mapping[str, Any],
           diff: Callable[[Any, Any], list[str]]) -> list[str]:
    out = [f"{kind} {k!s} added" + _what(new[k]) for k in new if k not in old]
    out += [f"{kind} {k!s} removed" for k in old if k not in new]
    for k in new:
        if k in old and old[k] != new[k]:
            out += [f"{kind} {k!s}: {d}" for d in diff(old[k], new[k])]
    return out


def _what(x: Any) -> str:
    if isinstance(x, Association):
        return f" (shares {x.shares}{', parent ' + x.parent if not x.user and x.parent else ''})"
    if isinstance(x, PartitionSetup):
        return f" (nodes {','.join(x.nodes)}, PriorityTier {x.priority_tier})"
    return f" ({x})"


# what a change of each field of a partition and of an association is called, and its text
_PARTITION_FIELDS: tuple[tuple[str, Callable[[PartitionSetup], str]], ...] = (
    ("nodes", lambda p: ",".join(p.nodes)), ("PriorityTier", lambda p: str(p.priority_tier)),
    ("TRESBillingWeights", lambda p: billing_text(tuple(sorted(p.billing_weights)))),
    ("PriorityJobFactor", lambda p: str(p.job_factor)), ("Default", lambda p: "YES" if p.default else "NO"))
_ASSOC_FIELDS: tuple[tuple[str, Callable[[Association], str]], ...] = (
    ("shares", lambda a: str(a.shares)), ("parent", lambda a: a.parent or "(none)"))


def _partition_diff(a: PartitionSetup, b: PartitionSetup) -> list[str]:
    return _fields_diff(a, b, _PARTITION_FIELDS)


def _assoc_diff(a: Association, b: Association) -> list[str]:
    return _fields_diff(a, b, _ASSOC_FIELDS)


def _fields_diff(a: Any, b: Any, fields: tuple[tuple[str, Callable[[Any], str]], ...]) -> list[str]:
    return [f"{name} {text(a)} -> {text(b)}" for name, text in fields if text(a) != text(b)]


def _changed(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, tuple[Any, Any]]]:
    return [(k, (a.get(k, 0), b.get(k, 0))) for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)]


# -- the history the twin can place ---------------------------------------------------------------

def twin_jobs(jobs: LiveJobs, setup: ClusterSetup) -> tuple[LiveJobs, dict[str, int]]:
    """The jobs of `jobs` the twin can simulate, and how many were left out by reason (the first
    that applies): a partition the setup does not have (a partition without GPU nodes, or one
    removed since), an association not in its tree (a user removed since, or another cluster's
    seed history), more GPUs than the job's partition has. Slurm would not run such a job now
    either."""
    spec = setup.cluster_spec()
    part_gpus = {p.name: len(p.nodes) * spec.gpus_per_node for p in spec.slurm_partitions}
    default = spec.slurm_partitions[0].name if spec.slurm_partitions else ""
    known = {(a.account, a.user) for a in setup.associations if a.user}

    def why(partition: str, account: str, user: str, gpus: int) -> str | None:
        if part_gpus and partition and partition not in part_gpus:
            return "partition not in the cluster's setup"
        if known and (account, user) not in known:
            return "association (account/user) not in the cluster's tree"
        if gpus > (part_gpus[partition or default] if part_gpus else spec.gpus):
            return "more GPUs than its partition has"
        return None

    reasons = [why(*r) for r in zip(jobs.partition.tolist(), jobs.account.tolist(),
                                    jobs.user.tolist(), jobs.gpus.tolist())]
    counts = dict(Counter(r for r in reasons if r is not None))
    keep = np.array([r is None for r in reasons], dtype=bool)
    return (jobs if keep.all() else take_jobs(jobs, keep)), counts


def trace_columns(trace: Any) -> dict[str, int]:
    """How many jobs of a `Trace` carry each optional column the twin reads (`TRACE_COLUMNS`): a
    time limit that is not NaN, a user, account or partition that is not empty."""
    out = {}
    for col in TRACE_COLUMNS:
        a = getattr(trace, col)
        if a is None:
            out[col] = 0
        elif col == "time_limit":
            out[col] = int(np.isfinite(np.asarray(a, dtype=float)).sum())
        else:
            out[col] = int(sum(1 for x in a.tolist() if str(x) != ""))
    return out


def twin_view(setup: ClusterSetup, history: Any) -> dict[str, Any]:
    """What ``autosched agent twin --json`` prints: the twin's partitions, associations, flags,
    the observed history's job count and how many of its jobs carry each optional column, and
    the warnings."""
    return jsonable({
        "partitions": [{"name": p.name, "nodes": list(p.nodes), "priority_tier": p.priority_tier,
                        "billing_weights": dict(p.billing_weights)} for p in setup.ordered_partitions()],
        "associations": [association_dict(a) for a in setup.associations],
        "priority_flags": list(setup.priority_flags),
        "jobs": len(history),
        "trace_columns": trace_columns(history),
        "warnings": setup.warnings(),
    })


def billed_tres_note(name: str, weights: tuple[tuple[str, float], ...]) -> str | None:
    """A note when a partition weighs TRES the simulator does not count (memory, nodes,
    licenses): their part of a job's billing is left out."""
    other = [t for t, w in weights if w and t.lower() not in {b.lower() for b in BILLED_TRES}]
    if not other:
        return None
    return (f"partition {name}: the twin bills only CPUs and GPUs; the weights of "
            f"{', '.join(other)} are left out")


def twin_space(policy: str, fixed: Mapping[str, Any], setup: ClusterSetup) -> LiveSpace:
    """`policy`'s knobs as the twin of the cluster `setup` describes simulates them: the managed
    ones, the operator's `fixed` values, and those the cluster sets (PriorityFlags) as it sets
    them (`LiveSpace.full` of a revision's config is the config simulated)."""
    return live_space(policy, {**fixed, **setup.pinned(live_space(policy, fixed).fixed)})
