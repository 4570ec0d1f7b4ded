"""The Fenwick tree against plain sums, including growth past its initial size."""

from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.policies.fenwick import Fenwick


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 9)), max_size=60),
       st.lists(st.integers(0, 200), min_size=1, max_size=5), st.integers(1, 8))
def test_prefix_and_search_match_plain_sums(adds, limits, size):
    tree, plain = Fenwick(size), {}
    for i, d in adds:
        tree.add(i, d)
        plain[i] = plain.get(i, 0) + d
    top = max([tree.size, *plain])

    def prefix(r):
        return sum(v for i, v in plain.items() if i <= r)

    assert tree.total == prefix(top)
    for r in range(top + 1):
        assert tree.prefix(r) == prefix(r)
    for limit in limits:
        pos, s = tree.search(limit)
        assert pos <= tree.size and s == prefix(pos) <= limit
        # the largest such position: one more would exceed the limit (or pass the end)
        assert pos == tree.size or prefix(pos + 1) > limit


def test_removal_and_a_hand_worked_search():
    tree = Fenwick(4)
    for i, g in [(1, 1), (2, 4), (3, 1), (5, 2)]:  # position 5 grows the tree to 8
        tree.add(i, g)
    assert tree.size == 8 and tree.total == 8
    assert tree.search(5) == (2, 5)  # 1 + 4; adding position 3 would make 6
    assert tree.search(6) == (4, 6)  # position 4 holds nothing: the run goes on to it
    tree.add(2, -4)  # the 4-GPU job leaves
    assert tree.search(3) == (4, 2) and tree.search(4) == (8, 4)
