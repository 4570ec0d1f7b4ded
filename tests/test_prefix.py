"""SortedPrefix against the plain definition: the longest prefix of the sorted members whose
weights sum to at most the limit, after any sequence of joins, leaves and re-weightings."""

from bisect import insort

from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.policies.prefix import SortedPrefix


def plain_fit(members, weight, limit):
    total = 0
    for i, j in enumerate(members):
        if total + weight[j] > limit:
            return i, total
        total += weight[j]
    return len(members), total


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fit_is_the_longest_prefix_within_the_limit(data):
    n = 30
    weight = data.draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    members: list[int] = []
    cut = SortedPrefix(members, weight)
    for _ in range(data.draw(st.integers(1, 60))):
        op = data.draw(st.sampled_from(["join", "leave", "reweigh", "fit", "fit"]))
        if op == "join":
            j = data.draw(st.sampled_from([j for j in range(n) if j not in members] or [None]))
            if j is not None:
                insort(members, j)
                cut.changed(j, weight[j])
        elif op == "leave" and members:
            j = members.pop(data.draw(st.integers(0, len(members) - 1)))
            cut.changed(j, -weight[j])
        elif op == "reweigh":
            j, w = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, 8))
            if j in members:
                cut.changed(j, w - weight[j])
            weight[j] = w
        else:
            limit = data.draw(st.integers(0, 60))
            assert cut.fit(limit) == plain_fit(members, weight, limit)


def test_a_hand_worked_cut():
    weight = [1, 4, 1, 2, 0, 3]
    members = [0, 1, 2, 3, 5]
    cut = SortedPrefix(members, weight)
    for j in members:
        cut.changed(j, weight[j])  # below the initial cut (-1): nothing counts yet
    assert cut.inside == 0
    assert cut.fit(5) == (2, 5)  # jobs 0 and 1; job 2 would make 6
    assert cut.bound == 2
    members.remove(1)
    cut.changed(1, -4)  # job 1 (4 GPUs) leaves from inside the prefix
    assert cut.inside == 1
    assert cut.fit(5) == (3, 4)  # jobs 0, 2, 3; job 5 would make 7
    assert cut.fit(0) == (0, 0)
