"""Placement on a 2x4 cluster, worked out by hand, for every policy and every placement."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.errors import SimulationError
from autosched.sim.placement import NodePool
from simkit import jct, run

POLICY_NAMES = ("fifo", "sjf", "srtf", "tiresias", "qssf", "multifactor")


# A (t=0, 3 GPUs, 100 s) and B (t=0, 3 GPUs, 100 s), then C (t=10, 2 GPUs, 50 s); a job spread
# over two nodes runs 1.5x slower. Every policy starts A and B at 0 (they fit together) and
# wants C to start at 10 (it is the only waiting job; srtf and tiresias see demand 8 <= 8 and
# preempt nothing), so the JCTs depend only on placement:
#  consolidate: A -> node 0 (3), B -> node 1 (3); C needs 2 GPUs on one node: none until A and
#               B end at 100. C: 100-150 -> JCT 140.
#  spread:      A -> node 0 (3); B first fit -> node 0 (1) + node 1 (2): two nodes, 150 s;
#               C -> node 1 (2): 10-60 -> JCT 50.
#  count:       C starts at 10 (2 GPUs free): JCT 50; no job is slowed.
EXPECTED = {
    "consolidate": [100, 100, 140],
    "spread": [100, 150, 50],
    "count": [100, 100, 50],
}
JOBS = [(0, 3, 100), (0, 3, 100), (10, 2, 50)]


@pytest.mark.parametrize("placement", EXPECTED)
@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_fragmentation_by_placement(policy, placement):
    sim = run(JOBS, policy, {"placement": placement}, nodes=2, spread_slowdown=1.5)
    assert jct(sim) == EXPECTED[placement]


# X (t=0, 4 GPUs, 10 s) takes node 0; Y (t=0, 2 GPUs, 1000 s) goes to node 1 (the only room).
# At 10 X ends: node 0 has 4 free, node 1 has 2. At 20 B (2 GPUs, 100 s) and C (4 GPUs, 100 s):
#  consolidate (best fit): B -> node 1 (2 free, the tightest); C -> node 0: both 20-120.
#  spread (first fit): B -> node 0; C gets node 0 (2) + node 1 (2): two nodes, 2x slower:
#                      20-220 -> JCT 200.
#  count: both start at 20 unslowed.
BEST_FIT_JOBS = [(0, 4, 10), (0, 2, 1000), (20, 2, 100), (20, 4, 100)]


@pytest.mark.parametrize("placement, c_jct", [("consolidate", 100), ("spread", 200), ("count", 100)])
def test_best_fit_versus_first_fit(placement, c_jct):
    sim = run(BEST_FIT_JOBS, "fifo", {"placement": placement}, nodes=2, spread_slowdown=2.0)
    assert jct(sim) == [10, 1000, 100, c_jct]
    if placement == "consolidate":
        seg = {j: alloc for j, _, _, alloc in sim.segments}
        assert seg[2] == ((1, 2),) and seg[3] == ((0, 4),)


def test_consolidate_gives_a_large_job_whole_nodes_and_it_is_slowed():
    # A (1 GPU) on node 0; B (5 GPUs, 100 s) takes node 1 whole plus 1 GPU of node 0 (best fit
    # for the remainder): two nodes, slowdown 1.5 -> 150 s. Under count it is not slowed.
    jobs = [(0, 1, 100), (0, 5, 100)]
    sim = run(jobs, "fifo", {"placement": "consolidate"}, nodes=2, spread_slowdown=1.5)
    assert jct(sim) == [100, 150]
    alloc = next(a for j, _, _, a in sim.segments if j == 1)
    assert sorted(alloc) == [(0, 1), (1, 4)]
    assert jct(run(jobs, "fifo", {"placement": "count"}, nodes=2, spread_slowdown=1.5)) == [100, 100]


def test_count_runs_a_job_that_consolidate_cannot_place():
    # A, B (3 GPUs each) leave one free GPU on each node; C (2 GPUs, 50 s) at t=0 fits only by
    # count. consolidate (strict FIFO): C waits for A and B: 100-150.
    jobs = [(0, 3, 100), (0, 3, 100), (0, 2, 50)]
    assert jct(run(jobs, "fifo", {"placement": "count"}, nodes=2)) == [100, 100, 50]
    assert jct(run(jobs, "fifo", {"placement": "consolidate"}, nodes=2)) == [100, 100, 150]


# ------------------------------------------------------ NodePool against a plain list of nodes

def _naive_place(free: list[int], gpn: int, gpus: int, mode: str, total_free: int):
    """What each placement means, written plainly over a list of free counts."""
    if gpus > total_free:
        return None
    if mode == "count":
        return ()
    if mode == "spread":
        alloc, need = [], gpus
        for node, f in enumerate(free):
            if f and need:
                alloc.append((node, min(f, need)))
                need -= min(f, need)
        return tuple(alloc)

    def best_fit(g, taken=()):
        fits = [(f, node) for node, f in enumerate(free) if f >= g and node not in taken]
        return min(fits)[1] if fits else None

    if gpus <= gpn:
        node = best_fit(gpus)
        return None if node is None else ((node, gpus),)
    whole, rest = divmod(gpus, gpn)
    empty = [node for node, f in enumerate(free) if f == gpn][:whole]
    if len(empty) < whole:
        return None
    alloc = tuple((node, gpn) for node in empty)
    if rest:
        node = best_fit(rest, empty)
        if node is None:
            return None
        alloc += ((node, rest),)
    return alloc


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_node_pool_places_as_the_plain_definition(data):
    nodes, gpn = data.draw(st.integers(1, 6)), data.draw(st.sampled_from([1, 2, 4, 8]))
    mode = data.draw(st.sampled_from(["consolidate", "spread", "count"]))
    pool, free, held = NodePool(nodes, gpn), [gpn] * nodes, []
    for _ in range(data.draw(st.integers(1, 40))):
        if held and data.draw(st.booleans()):
            g, alloc = held.pop(data.draw(st.integers(0, len(held) - 1)))
            pool.release(g, alloc)
            for node, x in alloc:
                free[node] += x
        else:
            g = data.draw(st.integers(1, nodes * gpn))
            alloc = pool.place(g, mode)
            total_free = nodes * gpn - sum(x for x, _ in held)
            assert alloc == _naive_place(free, gpn, g, mode, total_free)
            if alloc is not None:
                held.append((g, alloc))
                for node, x in alloc:
                    free[node] -= x
        assert pool.free_gpus == nodes * gpn - sum(g for g, _ in held)
        if mode != "count":
            assert pool.free == free


def _state(pool: NodePool) -> tuple:
    return pool.gpn, pool.capacity, pool.free_gpus, pool.free, pool.by_free, pool.counts


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_pool_from_free_counts_is_the_pool_that_got_there_by_placing(data):
    # The backfill planner builds pools from free counts; they must place as the engine's pool
    # that reached the same counts by placing and releasing jobs (up to 70 nodes: beyond 63
    # the bitmasks are no longer machine words).
    nodes, gpn = data.draw(st.integers(0, 70)), data.draw(st.sampled_from([1, 2, 4, 8]))
    pool, held = NodePool(nodes, gpn), []
    for _ in range(data.draw(st.integers(0, 30))):
        if held and data.draw(st.booleans()):
            pool.release(*held.pop(data.draw(st.integers(0, len(held) - 1))))
        elif nodes:
            g = data.draw(st.integers(1, nodes * gpn))
            alloc = pool.place(g, data.draw(st.sampled_from(["consolidate", "spread", "first_fit"])))
            if alloc is not None:
                held.append((g, alloc))
        assert _state(NodePool.from_free(pool.free, gpn)) == _state(pool)


def test_a_pool_from_free_counts_by_hand_and_refuses_impossible_counts():
    pool = NodePool.from_free([4, 1, 0, 3], 4)
    assert pool.free_gpus == 8 and pool.capacity == 16
    # best fit for 2 GPUs: node 3 (3 free) before node 0 (4 free); 1 GPU: node 1
    assert pool.place(2, "consolidate") == ((3, 2),) and pool.place(1, "consolidate") == ((1, 1),)
    assert pool.free == [4, 0, 0, 1] and pool.free_gpus == 5
    for bad in ([5, 0], [0, -1]):
        with pytest.raises(SimulationError, match="node 1 cannot have -1 free GPUs|node 0 cannot have 5 free"):
            NodePool.from_free(bad, 4)
