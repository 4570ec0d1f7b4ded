"""Which GPUs of which nodes a starting job gets."""

from __future__ import annotations

from itertools import islice

Alloc = tuple[tuple[int, int], ...]  # (node, GPUs) pairs; () under 'count' placement


class NodePool:
    """Free GPUs per node of one partition.

    Nodes are bucketed by their free-GPU count so that best fit and whole-node searches cost
    O(GPUs per node), not O(nodes). Buckets are insertion-ordered dicts: choices are deterministic.
    """

    def __init__(self, nodes: int, gpus_per_node: int):
        self.gpn = gpus_per_node
        self.capacity = nodes * gpus_per_node
        self.free_gpus = self.capacity
        self.free = [gpus_per_node] * nodes
        self.by_free: list[dict[int, None]] = [{} for _ in range(gpus_per_node + 1)]
        self.by_free[gpus_per_node] = dict.fromkeys(range(nodes))

    def place(self, gpus: int, mode: str) -> Alloc | None:
        """Take GPUs for a job, or return None (and change nothing) when it does not fit."""
        if gpus > self.free_gpus:
            return None
        if mode == "count":
            self.free_gpus -= gpus
            return ()
        alloc = self._consolidate(gpus) if mode == "consolidate" else self._spread(gpus)
        if alloc is not None:
            for node, g in alloc:
                self._take(node, g)
        return alloc

    def release(self, gpus: int, alloc: Alloc) -> None:
        if not alloc:
            self.free_gpus += gpus
            return
        for node, g in alloc:
            f = self.free[node]
            del self.by_free[f][node]
            self.free[node] = f + g
            self.by_free[f + g][node] = None
            self.free_gpus += g

    def _take(self, node: int, g: int) -> None:
        f = self.free[node]
        del self.by_free[f][node]
        self.free[node] = f - g
        self.by_free[f - g][node] = None
        self.free_gpus -= g

    def _best_fit(self, gpus: int, exclude: tuple[int, ...] = ()) -> int | None:
        for f in range(gpus, self.gpn + 1):
            for node in self.by_free[f]:
                if node not in exclude:
                    return node
        return None

    def _consolidate(self, gpus: int) -> Alloc | None:
        if gpus <= self.gpn:
            node = self._best_fit(gpus)
            return None if node is None else ((node, gpus),)
        whole, rest = divmod(gpus, self.gpn)
        empty = self.by_free[self.gpn]
        if len(empty) < whole:
            return None
        nodes = tuple(islice(empty, whole))
        alloc = tuple((n, self.gpn) for n in nodes)
        if rest:
            node = self._best_fit(rest, exclude=nodes)
            if node is None:
                return None
            alloc += ((node, rest),)
        return alloc

    def _spread(self, gpus: int) -> Alloc:
        alloc, need = [], gpus
        for node, f in enumerate(self.free):
            if f:
                g = min(f, need)
                alloc.append((node, g))
                need -= g
                if not need:
                    break
        return tuple(alloc)
