"""Which GPUs of which nodes a starting job gets.

Ties go to the lowest-numbered node, as in the Lucid and Helios simulators (they sort the node
list by free GPUs with a stable sort). This is not a detail: on the shared 2-day Philly slice
under FIFO, breaking best-fit ties towards the node that has held its free count longest instead
raises the average JCT by 15% (9,948 s against Lucid's 8,672 s), because packing small jobs onto
low-numbered nodes keeps the high-numbered ones whole for multi-node jobs. See docs/fidelity.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

from ..errors import SimulationError

Alloc = tuple[tuple[int, int], ...]  # (node, GPUs) pairs; () under 'count' placement


def _lowest(mask: int) -> int:
    """Index of the lowest set bit (mask > 0)."""
    return (mask & -mask).bit_length() - 1


class NodePool:
    """Free GPUs per node of one partition.

    Nodes are bucketed by their free-GPU count, each bucket a bitmask of node numbers, and a
    bitmask of the non-empty buckets is kept, so that a best fit is two bit operations and finds
    the lowest-numbered node of a bucket at once.
    """

    def __init__(self, nodes: int, gpus_per_node: int):
        self.gpn = gpus_per_node
        self.capacity = nodes * gpus_per_node
        self.free_gpus = self.capacity
        self.free = [gpus_per_node] * nodes
        self.by_free = [0] * (gpus_per_node + 1)  # free count -> bitmask of nodes
        self.by_free[gpus_per_node] = (1 << nodes) - 1
        self.counts = (1 << gpus_per_node) if nodes else 0  # bit f: some node has f GPUs free

    @classmethod
    def from_free(cls, free: Iterable[int], gpus_per_node: int) -> "NodePool":
        """A pool whose node n has ``free[n]`` GPUs free (each in ``[0, gpus_per_node]``).

        For a policy that plans on a copy of the nodes rather than the engine's pool: the
        backfill planner asks where the placement rule would put a job on the GPUs it expects
        to be free later, and places it on such a pool (the engine's own pool is only changed
        by the engine, through `place` and `release`)."""
        free = [int(f) for f in free]
        pool = cls(len(free), gpus_per_node)
        for n, f in enumerate(free):
            if f != gpus_per_node:
                if not 0 <= f < gpus_per_node:
                    raise SimulationError(f"node {n} cannot have {f} free GPUs (it has {gpus_per_node})")
                pool._set(n, f)
        pool.free_gpus = sum(free)
        return pool

    def place(self, gpus: int, mode: str, exclude: int = 0) -> Alloc | None:
        """Take GPUs for a job, or return None (and change nothing) when it does not fit.

        `exclude` is a bitmask of nodes the job may not use (nodes a backfill reservation holds);
        under 'count' placement there are no nodes, so it is ignored."""
        if gpus > self.free_gpus:
            return None
        if mode == "count":
            self.free_gpus -= gpus
            return ()
        if mode == "consolidate" and gpus <= self.gpn:  # one node, by best fit (the hot path)
            node = self._best_fit(gpus, exclude)
            alloc: Alloc | None = None if node is None else ((node, gpus),)
        elif mode == "consolidate":
            alloc = self._consolidate(gpus, exclude)
        elif mode == "first_fit":
            alloc = self._first_fit(gpus, exclude)
        else:
            alloc = self._spread(gpus, exclude)
        if alloc is not None:
            for node, g in alloc:
                self._set(node, self.free[node] - g)
            self.free_gpus -= gpus
        return alloc

    def release(self, gpus: int, alloc: Alloc) -> None:
        self.free_gpus += gpus
        for node, g in alloc:
            self._set(node, self.free[node] + g)

    def _set(self, node: int, f: int) -> None:
        by_free, bit = self.by_free, 1 << node
        old = self.free[node]
        self.free[node] = f
        left = by_free[old] ^ bit
        by_free[old] = left
        by_free[f] |= bit
        self.counts = (self.counts if left else self.counts ^ (1 << old)) | (1 << f)

    def _best_fit(self, gpus: int, exclude: int = 0) -> int | None:
        """The node, not in `exclude`, with the fewest free GPUs that still holds `gpus`;
        lowest number on ties. Only free counts some node has are looked at."""
        counts = self.counts >> gpus
        while counts:
            low = counts & -counts
            m = self.by_free[gpus + low.bit_length() - 1] & ~exclude
            if m:
                return _lowest(m)
            counts ^= low
        return None

    def _consolidate(self, gpus: int, exclude: int = 0) -> Alloc | None:
        # A job larger than a node (`place` gives a smaller one one node by best fit) gets whole
        # free nodes (the lowest-numbered), and its remainder goes on one more node by best fit
        # (Lucid puts the remainder on the freest node instead; only 12- and 24-GPU jobs differ).
        whole, rest = divmod(gpus, self.gpn)
        empty = self.by_free[self.gpn] & ~exclude
        if empty.bit_count() < whole:
            return None
        nodes, taken = [], 0
        for _ in range(whole):
            bit = empty & -empty
            empty ^= bit
            taken |= bit
            nodes.append(bit.bit_length() - 1)
        alloc = tuple((n, self.gpn) for n in nodes)
        if rest:
            node = self._best_fit(rest, exclude=taken | exclude)
            if node is None:
                return None
            alloc += ((node, rest),)
        return alloc

    def _first_fit(self, gpus: int, exclude: int = 0) -> Alloc | None:
        """As `_consolidate`, but a job that fits in one node goes on the lowest-numbered node
        that holds it (as Slurm's select plugin takes nodes in order), not the best fit."""
        if gpus > self.gpn:
            return self._consolidate(gpus, exclude)
        m = 0
        for f in range(gpus, self.gpn + 1):
            m |= self.by_free[f]
        m &= ~exclude
        return ((_lowest(m), gpus),) if m else None

    def _spread(self, gpus: int, exclude: int = 0) -> Alloc | None:
        # First fit in node order over the nodes with any free GPU (the caller checked the total,
        # which excluded nodes may make short).
        alloc, need = [], gpus
        m = ((1 << len(self.free)) - 1) & ~self.by_free[0] & ~exclude
        if exclude and sum(self.free[n] for n in range(len(self.free)) if m >> n & 1) < gpus:
            return None
        while need:
            node = _lowest(m)
            m &= m - 1
            g = min(self.free[node], need)
            alloc.append((node, g))
            need -= g
        return tuple(alloc)


class NodeView:
    """A partition's nodes as its policy sees them (`contract.Partition.pool`): what is free on
    each node, read-only. Only the engine changes the nodes (a start places a job, a finish or a
    preemption releases it); a policy that tries to (a `place`, a write to `free`, an attribute
    set) gets the contract's `SimulationError` at once, instead of a run whose records no longer
    match its nodes. A policy that plans (backfill's what-if: where would this job go on the GPUs
    free then?) plans on a copy (`planning_copy`, or `NodePool.from_free` on counts of its own).
    """

    __slots__ = ("_pool", "gpn", "capacity", "nodes")
    _pool: NodePool
    gpn: int  # GPUs per node
    capacity: int
    nodes: int

    def __init__(self, pool: NodePool) -> None:
        for name, value in (("_pool", pool), ("gpn", pool.gpn), ("capacity", pool.capacity),
                            ("nodes", len(pool.free))):
            object.__setattr__(self, name, value)  # (its own `__setattr__` refuses every write)

    @property
    def free_gpus(self) -> int:
        """Free GPUs over all nodes."""
        return self._pool.free_gpus

    @property
    def free(self) -> tuple[int, ...]:
        """Free GPUs on each node, by node number (a copy: it does not follow the engine)."""
        return tuple(self._pool.free)

    def planning_copy(self) -> NodePool:
        """A pool of the same free GPUs per node, the policy's own to place jobs on and release
        them from (a what-if plan); the engine's nodes do not change."""
        return NodePool.from_free(self._pool.free, self._pool.gpn)

    def __getattr__(self, name: str) -> Any:
        _read_only(f"`pool.{name}` is the engine's")

    def __setattr__(self, name: str, value: Any) -> None:
        _read_only(f"`pool.{name}` cannot be set")


def _read_only(what: str) -> NoReturn:
    raise SimulationError(f"{what}: a policy reads the partition's nodes (`part.pool`) and changes "
                          "them only through part.start and part.preempt; to plan, place jobs on "
                          "`part.pool.planning_copy()`")
