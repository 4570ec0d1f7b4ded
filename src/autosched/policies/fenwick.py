"""A Fenwick (binary indexed) tree of GPU counts by arrival rank.

A policy that takes jobs in submission order while their GPUs fit needs "the longest run of
jobs, in order, whose GPUs total at most Q" after every event. Re-adding a queue of hundreds of
jobs at each of tens of thousands of decisions dominated a simulation; with this tree an update
and that search each cost O(log n).
"""

from __future__ import annotations


class Fenwick:
    """Non-negative counts at positions 1, 2, ...; the size grows as positions arrive."""

    __slots__ = ("tree", "size", "total")

    def __init__(self, size: int = 64):
        self.size = 1 << max(size - 1, 1).bit_length()  # a power of two: search needs it
        self.tree = [0] * (self.size + 1)
        self.total = 0

    def add(self, i: int, delta: int) -> None:
        """Add delta at position i (1-based)."""
        if i > self.size:
            self._grow(i)
        self.total += delta
        tree, size = self.tree, self.size
        while i <= size:
            tree[i] += delta
            i += i & -i

    def _grow(self, i: int) -> None:
        # Doubling keeps every existing node (a node covers (i - lowbit(i), i], whatever the
        # size); of the new nodes only the last covers anything: everything.
        while self.size < i:
            self.tree.extend([0] * self.size)
            self.size *= 2
            self.tree[self.size] = self.total

    def prefix(self, i: int) -> int:
        """Sum of positions 1..i."""
        i = min(i, self.size)
        s, tree = 0, self.tree
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s

    def search(self, limit: int) -> tuple[int, int]:
        """The largest position r (at most the size) with prefix(r) <= limit, and prefix(r)."""
        if self.total <= limit:
            return self.size, self.total
        tree = self.tree
        pos = s = 0
        step = self.size >> 1
        while step:
            nxt = pos + step
            if s + tree[nxt] <= limit:
                pos = nxt
                s += tree[nxt]
            step >>= 1
        return pos, s
