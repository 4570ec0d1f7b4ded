"""autosched.switchback: the block schedule, the estimators and the permutation interval.

By-hand figures on four blocks; the estimator on synthetic blocks with a known effect; the
interval's coverage on null data; invariants as properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched import switchback as sb
from autosched.errors import InputError


def _blocks(arm, jobs, y, p0, p1) -> sb.Blocks:
    arm = np.asarray(arm, dtype=np.int64)
    return sb.Blocks(arm, np.arange(len(arm), dtype=np.int64) // 2, np.asarray(jobs, dtype=float),
                     np.asarray(y, dtype=float), np.column_stack([p0, p1]).astype(float))


# -- the schedule ---------------------------------------------------------------------------

def test_the_schedule_is_seeded_balanced_in_every_pair_and_recorded():
    s = sb.schedule("switchback", 16, seed=7)
    assert s.arms.shape == (16, 1) and np.array_equal(s.arms, sb.schedule("switchback", 16, 7).arms)
    pairs = s.arms[:, 0].reshape(8, 2)
    assert (pairs.sum(axis=1) == 1).all()  # one block of each arm in every pair
    # the draw: the arm of each pair's first block, from the seed
    first = np.random.default_rng(7).integers(0, 2, 8)
    assert pairs[:, 0].tolist() == first.tolist()
    # other seeds give other orders (8 pairs: 256 orders)
    assert len({tuple(sb.schedule("switchback", 16, k).arms[:, 0]) for k in range(20)}) > 15
    # recorded as the arms with the seed, and read back only if the seed draws them
    d = s.to_dict()
    assert d == {"design": "switchback", "seed": 7, "arms": s.arms.tolist()}
    assert np.array_equal(sb.Schedule.from_dict(d).arms, s.arms)
    tampered = dict(d, arms=[[1 - a[0]] for a in d["arms"]])
    with pytest.raises(InputError, match="are not what seed 7 draws"):
        sb.Schedule.from_dict(tampered)


def test_a_crossovers_second_cluster_runs_the_other_arm():
    s = sb.schedule("crossover", 6, seed=1)
    assert s.units == 2 and (s.arms.sum(axis=1) == 1).all()
    assert np.array_equal(s.arms[:, 0], sb.schedule("switchback", 6, 1).arms[:, 0])


def test_a_crossover_by_block_draws_every_blocks_arms_on_their_own():
    s = sb.schedule("crossover-by-block", 12, seed=4)
    assert s.units == 2 and (s.arms.sum(axis=1) == 1).all()  # both arms in every block
    assert s.arms[:, 0].tolist() == np.random.default_rng(4).integers(0, 2, 12).tolist()
    assert np.array_equal(s.arms, sb.schedule("crossover-by-block", 12, 4).arms)
    assert s.draws.tolist() == list(range(12))  # the block is the unit
    assert sb.schedule("crossover", 12, 4).draws.tolist() == [k // 2 for k in range(12)]
    assert np.array_equal(sb.Schedule.from_dict(s.to_dict()).arms, s.arms)
    with pytest.raises(InputError, match="are not what seed 4 draws"):
        sb.Schedule.from_dict(dict(s.to_dict(), design="crossover"))
    # the test flips each block: 2**12 assignments, each flipping both clusters of a block
    b = sb.Blocks.of(s, np.ones(24), np.ones(24), np.ones((24, 2)))
    assert b.pair.tolist() == [k // 2 for k in range(24)] and b.pairs == 12
    arms, exact = sb.assignments(b)
    assert exact and arms.shape == (4096, 24) and (arms.reshape(4096, 12, 2).sum(axis=2) == 1).all()


def _runs(arms1: list[int], y0: list[float], ratio: float, jobs: float = 200.0) -> sb.Blocks:
    """Runs of a crossover by run read together, as `closed_loop_blocks.Experiment` reads them:
    run k's cluster A runs arm ``arms1[k]``, its clusters' figures ``y0[k]`` under arm 0 and
    ``ratio`` times that under arm 1 (the twin the same as realized)."""
    arm = np.array([[a, 1 - a] for a in arms1], dtype=np.int64).reshape(-1)
    # the two clusters of a run part by 1% on the same jobs (cluster B the slower)
    y = np.repeat(np.asarray(y0, dtype=float), 2) * np.tile([1.0, 1.01], len(arms1)) * np.where(arm == 1, ratio, 1.0)
    twin = np.column_stack([y / np.where(arm == 1, ratio, 1.0), y / np.where(arm == 1, ratio, 1.0) * ratio])
    return sb.Blocks(arm, np.repeat(np.arange(len(arms1)), 2).astype(np.int64), np.full(len(arm), jobs), y, twin)


def test_a_crossover_by_run_is_one_block_and_each_run_one_unit():
    s = sb.schedule("crossover-by-run", 1, seed=3)
    assert s.arms.shape == (1, 2) and s.arms.sum() == 1
    assert s.arms[0, 0] == np.random.default_rng(3).integers(0, 2, 1)[0]
    assert s.draws.tolist() == [0]
    assert np.array_equal(sb.Schedule.from_dict(s.to_dict()).arms, s.arms)
    # six runs, every one halving the mean JCT, whichever cluster drew the agent's config: the
    # test flips each run (64 assignments), and only the observed one and its mirror are as far
    # from 0, so p = 2/64
    b = _runs([1, 0, 0, 1, 1, 0], [300, 310, 290, 305, 295, 300], 0.5)
    e = sb.effect(b, "plain", "constant")
    assert e.exact and e.assignments == 64 and e.pairs == 6
    assert e.p_value == pytest.approx(2 / 64)
    assert e.estimate == pytest.approx(math.log(0.5), abs=0.01) and e.low <= math.log(0.5) <= e.high < 0
    assert e.half_width < 0.02  # six runs that agree within 1% pin the ratio within about 1%
    # five runs cannot: 32 assignments, and the two extreme ones give p = 1/16
    assert sb.effect(_runs([1, 0, 0, 1, 1], [300, 310, 290, 305, 295], 0.5), "plain", "constant").p_value \
        == pytest.approx(2 / 32)
    # one run that went the other way, and the interval reaches 0
    mixed = _runs([1, 0, 0, 1, 1, 0], [300, 310, 290, 305, 295, 300], 0.5)
    flipped = sb.Blocks(mixed.arm, mixed.pair, mixed.jobs, mixed.realized[[1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]],
                        mixed.twin)
    assert sb.effect(flipped, "plain", "constant").p_value > 0.05


@pytest.mark.parametrize("args, message", [
    (("switchback", 5, 0), "an even number"), (("switchback", 0, 0), "an even number"),
    (("crossover-by-run", 2, 0), "one block, the whole window"), (("crossover-by-block", 1, 0), "an even number"),
    (("zigzag", 4, 0), "one of switchback, crossover, crossover-by-block"), (("crossover", 4, -1), "seed -1")])
def test_bad_schedules(args, message):
    with pytest.raises(InputError, match=message):
        sb.schedule(*args)


# -- the estimators by hand -----------------------------------------------------------------

def test_the_estimators_by_hand():
    # arms 1 0 | 0 1; jobs 1 2 | 1 1; mean JCT 10 20 | 30 40; the twin under arm 0: 12 18 30 35,
    # under arm 1: 8 16 28 30
    b = _blocks([1, 0, 0, 1], [1, 2, 1, 1], [10, 20, 30, 40], [12, 18, 30, 35], [8, 16, 28, 30])
    obs = b.arm[None, :]
    # plain: arm 1 (10 + 40) / 2 = 25; arm 0 (2 x 20 + 30) / 3 = 70 / 3
    mu0, mu1 = sb.arm_means(b, obs, b.realized[None, :], "plain")
    assert (mu0[0], mu1[0]) == pytest.approx((70 / 3, 25.0))
    assert sb.statistics(b, obs, "plain", np.zeros(4))[0] == pytest.approx(math.log(25 / (70 / 3)))
    # twin: arm 1: what was realized over what the twin predicted on its blocks, (10 + 40) / (8 + 30),
    # times the twin's job-weighted mean under arm 1 over all blocks, (8 + 2 x 16 + 28 + 30) / 5;
    # arm 0: (2 x 20 + 30) / (2 x 18 + 30) times (12 + 2 x 18 + 30 + 35) / 5
    m1, m0 = 50 / 38 * 98 / 5, 70 / 66 * 113 / 5
    mu0, mu1 = sb.arm_means(b, obs, b.realized[None, :], "twin")
    assert (mu0[0], mu1[0]) == pytest.approx((m0, m1))
    e = sb.effect(b, "twin")
    assert e.estimate == pytest.approx(math.log(m1 / m0))
    assert (e.mean0, e.mean1) == pytest.approx((m0, m1))
    # each pair on its own: pair 0: arm 1 10 / 8 x (8 + 2 x 16) / 3, arm 0 40 / 36 x (12 + 2 x 18) / 3;
    # pair 1: arm 1 40 / 30 x (28 + 30) / 2, arm 0 30 / 30 x (30 + 35) / 2
    want0 = math.log((10 / 8 * 40 / 3) / (40 / 36 * 48 / 3))
    want1 = math.log((40 / 30 * 58 / 2) / (65 / 2))
    assert sb.pair_effects(b).tolist() == pytest.approx([want0, want1])


def test_a_block_without_jobs_weighs_nothing():
    with_empty = sb.Blocks.of(sb.Schedule("switchback", 0, np.array([[1], [0], [0], [1]])),
                              [3, 2, 0, 1], [10, 20, np.nan, 40], [[9, 8], [19, 18], [np.nan, np.nan], [41, 40]])
    assert with_empty.realized[2] == 0 and with_empty.twin[2].tolist() == [0, 0]
    # arm 0's only measured block is block 1: plain mean 20; arm 1's (3 x 10 + 40) / 4
    mu0, mu1 = sb.arm_means(with_empty, with_empty.arm[None, :], with_empty.realized[None, :], "plain")
    assert (mu0[0], mu1[0]) == pytest.approx((20.0, 70 / 4))
    assert math.isnan(sb.pair_effects(with_empty)[1])  # pair 1's arm 0 measured nothing


def test_the_assignments_flip_whole_pairs():
    b = _blocks([1, 0, 0, 1, 1, 0], [1] * 6, [1] * 6, [1] * 6, [1] * 6)
    arms, exact = sb.assignments(b)
    assert exact and arms.shape == (8, 6) and arms[0].tolist() == [1, 0, 0, 1, 1, 0]
    assert len({tuple(a) for a in arms}) == 8 and (arms.reshape(8, 3, 2).sum(axis=2) == 1).all()


def test_too_few_pairs_never_reject_and_say_so():
    # 4 pairs: 16 assignments, so no p-value is below 1/16 > 5%: the interval is unbounded
    rng = np.random.default_rng(0)
    s = sb.schedule("switchback", 8, 0)
    y = np.exp(rng.normal(3, 0.1, 8) - 2 * s.arms[:, 0])
    b = sb.Blocks.of(s, np.full(8, 10), y, np.exp(rng.normal(3, 0.1, (8, 2))))
    e = sb.effect(b)
    assert e.assignments == 16 and e.p_value >= 1 / 16
    assert e.low == -math.inf and e.high == math.inf and e.pairs_for(0.1) == 24


@pytest.mark.parametrize("shape", sb.SHAPES)
def test_the_interval_is_where_the_test_does_not_reject(shape):
    # 6 pairs on two clusters: the interval's ends, against p-values computed from scratch
    b = _synthetic(3, -0.2, blocks=12, design="crossover")
    e = sb.effect(b, shape=shape)
    arms, _ = sb.assignments(b)
    # the family's per-block log ratios up to the constant: the twin's, or none
    d = np.log(b.twin[:, 1] / b.twin[:, 0]) if shape == "twin" else np.zeros(len(b.arm))

    def test(theta):  # the hypothesis' implied ratio, and its p-value
        h = theta + d
        y0 = b.realized / np.exp(h * b.arm)  # every block's figure under arm 0
        implied = math.log((b.jobs @ (y0 * np.exp(h))) / (b.jobs @ y0))
        stats = []
        for a in arms:
            y = y0 * np.exp(h * a)
            m1 = (b.jobs * a) @ y / ((b.jobs * a) @ b.twin[:, 1]) * (b.jobs @ b.twin[:, 1])
            m0 = (b.jobs * (1 - a)) @ y / ((b.jobs * (1 - a)) @ b.twin[:, 0]) * (b.jobs @ b.twin[:, 0])
            stats.append(math.log(m1 / m0) - implied)
        return implied, np.mean(np.abs(stats) >= abs(stats[0]) - 1e-12)

    thetas = np.linspace(-1, 1, 1601)  # steps of 0.00125
    tested = [test(t) for t in thetas]
    kept = [r for r, p in tested if p > 0.05]
    assert e.low == pytest.approx(min(kept), abs=2e-3) and e.high == pytest.approx(max(kept), abs=2e-3)
    assert e.low < e.estimate < e.high and e.excludes_zero()
    assert e.p_value == pytest.approx(test(0.0)[1] if shape == "constant" else sb.effect(b, shape="constant").p_value)


# -- synthetic experiments ------------------------------------------------------------------

def _synthetic(seed: int, effect: float, blocks: int = 12, design: str = "switchback",
               twin_effect: float = 0.7, shared: bool = False) -> sb.Blocks:
    """Blocks whose mean JCT varies a lot from block to block (the workload: log sd 0.5), which
    the twin follows up to its own error (log sd 0.05), with 0-60 measured jobs each; arm 1's
    figures exp(`effect`) times arm 0's (a constant ratio), the twin's prediction of the ratio
    exp(`twin_effect` x `effect`); block noise log sd 0.1, the same under either arm. `shared`:
    a crossover's clusters meet the same jobs in a block (one workload and one job count for
    both, each cluster's noise log sd 0.05)."""
    rng = np.random.default_rng(seed)
    s = sb.schedule(design, blocks, seed)
    n = blocks * s.units
    if shared:
        base = np.repeat(rng.normal(4, 0.5, blocks), s.units)
        jobs = np.repeat(rng.integers(0, 61, blocks), s.units)
        noise = rng.normal(0, 0.05, n)
    else:
        base, jobs, noise = rng.normal(4, 0.5, n), rng.integers(0, 61, n), rng.normal(0, 0.1, n)
    twin = np.exp(np.column_stack([base, base + twin_effect * effect]) + rng.normal(0, 0.05, (n, 2)))
    y = np.exp(base + noise + effect * s.arms.reshape(-1))
    return sb.Blocks.of(s, jobs, y, twin)


@pytest.mark.parametrize("how", sb.ESTIMATORS)
def test_a_known_effect_is_recovered(how):
    # 200 blocks: the twin-adjusted estimate's sd is about 0.11 x 2 / sqrt(200) = 0.016, the plain
    # one's 0.5 x 2 / sqrt(200) = 0.07 (more with the weights); each lands within 3 sd of -0.2
    b = _synthetic(11, -0.2, blocks=200)
    sd = {"twin": 0.02, "plain": 0.09}[how]
    e = sb.effect(b, how)
    assert not e.exact and e.assignments == sb.SAMPLED + 1
    assert abs(e.estimate + 0.2) < 3 * sd
    assert e.low < -0.2 < e.high and e.high < 0  # the interval holds the truth and excludes 0
    gain, lo, hi = e.gain()
    assert lo < gain < hi and gain == pytest.approx(1 - math.exp(e.estimate))


@pytest.mark.parametrize("design, blocks, shape, how", [
    ("switchback", 12, "twin", "twin"), ("crossover", 12, "twin", "twin"), ("switchback", 12, "constant", "twin"),
    ("crossover-by-block", 10, "constant", "plain")])
def test_the_interval_covers_zero_on_null_data_at_about_the_nominal_rate(design, blocks, shape, how):
    # 300 experiments without an effect, the twin right about that: a 95% interval misses 0 in
    # about 5% of them (binomial sd 1.3%; the permutation test is exact for its family, and
    # conservative by its discreteness). A crossover by block of 10 blocks: 1,024 assignments
    covered = []
    for seed in range(300):
        e = sb.effect(_synthetic(seed, 0.0, blocks=blocks, design=design, twin_effect=0.0, shared=design != "switchback"),
                      how, shape)
        covered.append(e.low <= 0 <= e.high)
    assert 0.92 <= np.mean(covered) <= 0.99


def test_a_crossover_pairs_the_arms_on_the_same_jobs():
    # both clusters of a block meet the same workload (log sd 0.5 between blocks) and part by
    # their own chaos (log sd 0.05): the plain contrast needs no twin, and a crossover by block
    # resolves what a switchback of as many blocks cannot without one
    covers = 0
    for seed in range(8):
        e = sb.effect(_synthetic(seed, -0.2, design="crossover-by-block", shared=True), "plain", "constant")
        switchback = sb.effect(_synthetic(seed, -0.2), "plain", "constant")
        assert e.assignments == 4096 and e.high < 0  # every experiment sees the effect
        assert e.half_width < switchback.half_width / 3
        covers += e.low <= -0.2 <= e.high
    assert covers >= 6  # a 95% interval: rarely misses the truth (1 of 8 here)


def test_the_twin_narrows_the_interval():
    e = [sb.effect(_synthetic(5, -0.2, blocks=16), how) for how in ("twin", "plain")]
    assert e[0].half_width < e[1].half_width / 3


def test_pairs_needed_and_gain_by_hand():
    e = sb.Effect("twin", "twin", -0.1, -0.3, 0.1, 0.4, 64, True, 6, 10.0, 9.0)
    assert e.half_width == pytest.approx(0.2) and not e.excludes_zero()
    assert e.pairs_for(0.1) == 24  # half as wide: four times the pairs
    assert e.pairs_for(0.5) == 6  # never fewer than it had
    g = e.gain()
    assert g == pytest.approx((1 - math.exp(-0.1), 1 - math.exp(0.1), 1 - math.exp(-0.3)))


def test_bad_block_data():
    s = sb.schedule("switchback", 4, 0)
    with pytest.raises(InputError, match="4 job counts, 3 realized and 4 twin figures for 4 blocks x 1"):
        sb.Blocks.of(s, [1] * 4, [1, 2, 3], np.ones((4, 2)))
    with pytest.raises(InputError, match="not a finite number"):
        sb.Blocks.of(s, [1] * 4, [1, 2, np.nan, 3], np.ones((4, 2)))
    no_arm1 = sb.Blocks.of(s, np.where(s.arms[:, 0] == 1, 0, 5), [1, 2, 3, 4], np.ones((4, 2)))
    with pytest.raises(InputError, match="an arm measured no job"):
        sb.effect(no_arm1)


# -- invariants -----------------------------------------------------------------------------

_logs = st.lists(st.floats(-3, 3, allow_nan=False), min_size=40, max_size=40)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), _logs, st.floats(-2, 2), st.floats(-1, 1), st.sampled_from(sb.ESTIMATORS))
def test_scales_and_swapped_labels(seed, logs, log_c, log_rho, how):
    s = sb.schedule("crossover", 10, seed)
    y = np.exp(np.array(logs[:20]))
    twin = np.repeat(np.exp(np.array(logs[20:]).reshape(10, 2)), 2, axis=0)  # both clusters' twin alike here
    b = sb.Blocks.of(s, np.random.default_rng(seed).integers(1, 30, 20), y, twin)

    def est(bb):
        return sb.statistics(bb, bb.arm[None, :], how, np.zeros(len(bb.arm)))[0]

    if not math.isfinite(est(b)):  # the twin's adjustment can leave a mean <= 0: undefined
        return
    c, rho = math.exp(log_c), math.exp(log_rho)
    # every figure times the same factor: nothing changes
    assert est(sb.Blocks(b.arm, b.pair, b.jobs, b.realized * c, b.twin * c)) == pytest.approx(est(b), abs=1e-9)
    # arm 1's figures (realized on its blocks, and the twin's arm-1 column) times rho: + log rho
    scaled = sb.Blocks(b.arm, b.pair, b.jobs, b.realized * rho ** b.arm, b.twin * [1.0, rho])
    assert est(scaled) == pytest.approx(est(b) + log_rho, abs=1e-9)
    # the arms' labels swapped (the twin's columns too): the effect changes sign
    assert est(sb.Blocks(1 - b.arm, b.pair, b.jobs, b.realized, b.twin[:, ::-1])) == pytest.approx(-est(b), abs=1e-9)
    e = sb.effect(b, how)
    assert e.low <= e.estimate <= e.high and 0 < e.p_value <= 1
