"""The longest prefix of a sorted job list whose GPUs fit under a limit, kept between decisions.

A policy that takes jobs in order while their GPUs fit needs, after every event, "the longest
run of jobs, in order, whose GPUs total at most Q". Adding up a queue of hundreds of jobs at each
of tens of thousands of decisions dominated a simulation. Here the prefix is remembered as a cut
("jobs with an index below `bound`") with its total: a change to the list costs O(1), and a new
limit moves the cut by walking over only the jobs it crosses.
"""

from __future__ import annotations

import math
from bisect import bisect_left


class SortedPrefix:
    """A cut through `members` (job indices, kept sorted by the owner) weighted by `weight`.

    The owner calls `changed(j, delta)` (or makes the same test, ``j < bound``, inline on a hot
    path) whenever job j joins (+its weight) or leaves (-its weight) `members`, or its weight
    changes; `fit(limit)` then moves the cut.
    """

    __slots__ = ("members", "weight", "bound", "inside")

    def __init__(self, members: list[int], weight: list[int]):
        self.members = members
        self.weight = weight
        self.bound: float = -1  # the members below it are in the prefix (none yet)
        self.inside = 0  # their total weight

    def changed(self, j: int, delta: int) -> None:
        if j < self.bound:
            self.inside += delta

    def fit(self, limit: int) -> tuple[int, int]:
        """Move the cut to the longest prefix whose weight is at most `limit` (weights are >= 0);
        returns the prefix's length and weight. The cut is then the first member left out."""
        assert limit >= 0, limit
        members, weight = self.members, self.weight
        i = bisect_left(members, self.bound)
        inside = self.inside
        while inside > limit:
            i -= 1
            inside -= weight[members[i]]
        n = len(members)
        while i < n:
            w = weight[members[i]]
            if inside + w > limit:
                break
            inside += w
            i += 1
        self.bound = members[i] if i < n else math.inf
        self.inside = inside
        return i, inside
