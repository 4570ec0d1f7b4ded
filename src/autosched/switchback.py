"""Block experiments on a live cluster: the randomised schedule of two configs, the twin-adjusted
estimate of the difference they make, and its permutation confidence interval.

Two configs (arm 0, the baseline; arm 1, the treatment) take turns in blocks of equal length. On
one cluster this is a *switchback* (the config in force alternates); on two clusters a
*crossover* (in each block one cluster runs each arm). In a switchback and a crossover, blocks
come in pairs, and within each pair the order of the arms is drawn at random (`schedule`, seeded;
the drawn arms are recorded beside the seed and checked against it), so that the cluster's own
drift, or one cluster being slower, cancels within every pair. In a *crossover by block* each
block's arms are drawn on their own: every block already holds both arms, on the same jobs, so
the block is the unit of the randomisation; twice as many units give the test a finer
distribution, and a slower cluster, no longer cancelled within a pair, adds to the spread but
not to the estimate (it takes arm 1 as often as arm 0, on average over the draws). In a
*crossover by run* the whole window is one block: each cluster runs one arm from the window's
first job to its last, which cluster runs arm 1 is drawn, and a run is one unit: replicate runs
of the window are read together (a config that acts through the backlog a burst leaves, a day
later, is measured whole, where shorter blocks split it between arms).

**The estimate.** Every block of every cluster is one observation: the arm in force, how many
jobs the block measured (those submitted after its washout), their mean figure ``Y`` (average
JCT, or wait), and the twin's means ``P0``, ``P1`` of the same jobs replayed from the block's
real starting state under each arm. Each arm's mean over all blocks is estimated, job-weighted:

- ``twin`` (the twin as a control variate, as CUPAC uses a model's prediction, in the ratio
  form of survey sampling): the twin's mean under arm ``a`` over every block, times the ratio of
  what was realized to what the twin predicted on the blocks that ran arm ``a`` (job-weighted
  sums of ``Y`` over sums of ``Pa``). The twin's predictions come from what was there before the
  block's arm acted (its submissions and starting state), so the estimate stays consistent under
  the randomisation however wrong the twin is, and the better the twin follows the cluster, the
  more of the blocks' variance (the workload's) it takes out. A ratio, not a difference, because
  a block's twin error grows with its level (a block's mean JCT ranges over two orders of
  magnitude), and so that no estimated mean can be negative;
- ``plain``: the job-weighted mean of ``Y`` over the blocks that ran arm ``a``, without the
  twin (what the twin saves).

The effect is the log ratio of arm 1's mean to arm 0's (a gain of ``1 - exp(effect)``: 0.1 is
arm 1 10% lower). A block without a measured job weighs nothing.

**The interval.** A permutation test over the design's own randomisation: every unit's arms (a
pair of blocks, or a block in a crossover by block) flipped or not (all ``2**pairs`` assignments
up to `EXACT_PAIRS` pairs, else a seeded sample of
`SAMPLED`). It is inverted for a constant ratio ``rho`` (each block's figure under arm 1 is
``rho`` times its figure under arm 0: the observed ``Y`` of an arm-1 block divided by ``rho`` is
its figure under arm 0): the 95% interval is every ``log rho`` the test does not reject at 5%. Its
coverage is exact for a constant ratio when the washout makes a block's figures independent of
the arms before it. With 4 units or fewer no p-value is below 1/16, so no finite interval exists.

Pure computation: numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .errors import InputError

Design = Literal["switchback", "crossover", "crossover-by-block", "crossover-by-run"]
Estimator = Literal["twin", "plain"]
Shape = Literal["twin", "constant"]
DESIGNS: tuple[Design, ...] = ("switchback", "crossover", "crossover-by-block", "crossover-by-run")
# two clusters, both arms in every block
CROSSOVERS: tuple[Design, ...] = ("crossover", "crossover-by-block", "crossover-by-run")
BY_BLOCK: tuple[Design, ...] = ("crossover-by-block", "crossover-by-run")  # each block a unit of its own
ESTIMATORS: tuple[Estimator, ...] = ("twin", "plain")
SHAPES: tuple[Shape, ...] = ("twin", "constant")
EXACT_PAIRS = 12  # units (pairs, or blocks); up to 4,096 assignments: enumerate them all
SAMPLED = 4000  # beyond: this many drawn assignments (seeded), with the observed one
ALPHA = 0.05
MAX_LOG_RATIO = 20.0  # a ratio beyond e^20 is no bound: the interval is unbounded on that side

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Schedule:
    """Which arm each cluster (column) runs in each block (row), drawn by `schedule` from
    `seed`. A switchback has one column, a crossover two (complementary)."""

    design: Design
    seed: int
    arms: IntArray  # (blocks, units) of 0/1

    @property
    def blocks(self) -> int:
        return int(self.arms.shape[0])

    @property
    def units(self) -> int:
        return int(self.arms.shape[1])

    @property
    def draws(self) -> IntArray:
        """The unit of the randomisation each block belongs to: its pair, or itself in a
        crossover by block."""
        b = np.arange(self.blocks, dtype=np.int64)
        return b if self.design in BY_BLOCK else b // 2

    def to_dict(self) -> dict[str, Any]:
        return {"design": self.design, "seed": self.seed, "arms": self.arms.tolist()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Schedule":
        """The recorded schedule; InputError if its arms are not what its seed draws."""
        try:
            design, seed, arms = d["design"], int(d["seed"]), np.asarray(d["arms"], dtype=np.int64)
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"a block schedule needs design, seed and arms: {e}") from None
        drawn = schedule(design, len(arms), seed)
        if arms.shape != drawn.arms.shape or not np.array_equal(arms, drawn.arms):
            raise InputError(f"the recorded arms {arms.tolist()} are not what seed {seed} draws for a "
                             f"{design} of {len(arms)} blocks ({drawn.arms.tolist()})")
        return drawn


def schedule(design: str, blocks: int, seed: int) -> Schedule:
    """A randomised schedule of `blocks` blocks (even, at least 2; exactly 1 in a crossover by
    run): in each pair of blocks, the arm of the first is drawn (from `seed`) and the second runs
    the other, or in a crossover by block (or by run) every block's arm is drawn; a crossover's
    second cluster runs the complement of the first."""
    if design not in DESIGNS:
        raise InputError(f"design {design!r}: one of {', '.join(DESIGNS)}")
    if design == "crossover-by-run" and blocks != 1:
        raise InputError(f"{blocks} blocks: a crossover by run is one block, the whole window")
    if design != "crossover-by-run" and (blocks < 2 or blocks % 2):
        raise InputError(f"{blocks} blocks: a block design needs an even number, at least 2")
    if seed < 0:
        raise InputError(f"seed {seed}: a seed is an integer >= 0")
    rng = np.random.default_rng(seed)
    if design in BY_BLOCK:
        col = rng.integers(0, 2, blocks).astype(np.int64)
    else:
        first = rng.integers(0, 2, blocks // 2)
        col = np.column_stack([first, 1 - first]).ravel().astype(np.int64)
    arms = np.column_stack([col, 1 - col]) if design in CROSSOVERS else col[:, None]
    return Schedule(design, seed, arms)  # type: ignore[arg-type]  # checked above


@dataclass(frozen=True)
class Blocks:
    """The observations of a block experiment, one per block and cluster: the arm in force, the
    unit of the randomisation it belongs to (`pair`: its pair of blocks, or its block in a
    crossover by block), how many jobs it measured, their mean figure and the twin's
    mean of them under each arm (columns 0 and 1). Figures of a block without jobs are 0 (they
    weigh nothing)."""

    arm: IntArray
    pair: IntArray
    jobs: FloatArray
    realized: FloatArray
    twin: FloatArray  # (n, 2)

    @classmethod
    def of(cls, sched: Schedule, jobs: npt.ArrayLike, realized: npt.ArrayLike, twin: npt.ArrayLike) -> "Blocks":
        """Observations in the schedule's order (block by block, each block's clusters in
        order): `jobs` and `realized` have blocks x units values, `twin` blocks x units x 2; a
        block without jobs may have NaN figures."""
        n_jobs = np.asarray(jobs, dtype=float).reshape(-1)
        y = np.asarray(realized, dtype=float).reshape(-1)
        p = np.asarray(twin, dtype=float).reshape(-1, 2)
        n = sched.blocks * sched.units
        if not len(n_jobs) == len(y) == len(p) == n:
            raise InputError(f"{len(n_jobs)} job counts, {len(y)} realized and {len(p)} twin figures for "
                             f"{sched.blocks} blocks x {sched.units} cluster(s)")
        has = n_jobs > 0
        if (n_jobs < 0).any() or not (np.isfinite(y[has]).all() and np.isfinite(p[has]).all()):
            raise InputError("a block with jobs has a figure that is not a finite number (or a job count < 0)")
        pair = np.repeat(sched.draws, sched.units).astype(np.int64)
        return cls(sched.arms.reshape(-1), pair, n_jobs, np.where(has, y, 0.0),
                   np.where(has[:, None], p, 0.0))

    @property
    def pairs(self) -> int:
        return int(self.pair.max()) + 1


def arm_means(b: Blocks, arms: IntArray, y: FloatArray, how: Estimator) -> tuple[FloatArray, FloatArray]:
    """Each arm's job-weighted mean by estimator `how`, for each row of `arms` (assignments x
    observations; the observed one: ``b.arm[None, :]``), with the realized figures `y` (one row
    per assignment, or one for all). NaN where an arm measured no job."""
    w = b.jobs
    out = []
    for a in (0, 1):
        m = (arms == a) * w
        n = m.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            if how == "plain":
                mu = (m * y).sum(axis=1) / n
            elif how == "twin":
                mu = (m * y).sum(axis=1) / (m @ b.twin[:, a]) * (float(w @ b.twin[:, a]) / float(w.sum()))
            else:
                raise InputError(f"estimator {how!r}: one of {', '.join(ESTIMATORS)}")
        out.append(np.where(n > 0, mu, np.nan))
    return out[0], out[1]


def shape_of(b: Blocks, shape: Shape) -> FloatArray:
    """Each block's log ratio (arm 1 to arm 0) up to the constant the interval inverts: the twin's
    own (``twin``: log P1 - log P0; 0 for a block without jobs), or none (``constant``)."""
    if shape == "constant":
        return np.zeros(len(b.arm))
    if shape != "twin":
        raise InputError(f"shape {shape!r}: one of {', '.join(SHAPES)}")
    has = (b.jobs > 0) & (b.twin > 0).all(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(has, np.log(np.where(has[:, None], b.twin, 1.0)).dot([-1.0, 1.0]), 0.0)


def statistics(b: Blocks, arms: IntArray, how: Estimator, h: FloatArray) -> FloatArray:
    """The test statistic of each assignment (rows of `arms`) under the hypothesis that block j's
    figure under arm 1 is exp(h[j]) times its figure under arm 0: the estimated log ratio had the
    assignment been drawn (each block's figures imputed from the observed one), minus the log
    ratio of the arms' job-weighted means the hypothesis implies. NaN where an arm measured no
    job in the assignment."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        y = b.realized[None, :] * np.exp(h * (arms - b.arm[None, :]))
        mu0, mu1 = arm_means(b, arms, y, how)
        implied = implied_log_ratio(b, h)
        return np.where((mu0 > 0) & (mu1 > 0), np.log(mu1) - np.log(mu0), np.nan) - implied


def implied_log_ratio(b: Blocks, h: FloatArray) -> float:
    """The log ratio of the arms' job-weighted means over all blocks that the hypothesis `h` (see
    `statistics`) implies, from the observed figures."""
    return math.log(float(b.jobs @ (b.realized * np.exp(h * (1 - b.arm))))
                    / float(b.jobs @ (b.realized * np.exp(-h * b.arm))))


def assignments(b: Blocks, seed: int = 0) -> tuple[IntArray, bool]:
    """The arms of every assignment the design could have drawn (rows; the observed one first),
    and whether that is all of them (else a seeded sample of `SAMPLED`)."""
    k = b.pairs
    if k <= EXACT_PAIRS:
        flips = ((np.arange(2 ** k)[:, None] >> np.arange(k)) & 1).astype(np.int64)
        exact = True
    else:
        drawn = np.random.default_rng(seed).integers(0, 2, (SAMPLED, k))
        flips = np.vstack([np.zeros((1, k), dtype=np.int64), drawn]).astype(np.int64)
        exact = False
    return (b.arm[None, :] ^ flips[:, b.pair]).astype(np.int64), exact


@dataclass(frozen=True)
class Effect:
    """Arm 1's effect: the log ratio of its mean figure to arm 0's, with its 95% interval and the
    p-value of "no effect" (`gain` turns them into relative gains), and each arm's estimated mean."""

    estimator: Estimator
    shape: Shape  # the family of hypotheses the interval inverts
    estimate: float
    low: float
    high: float
    p_value: float
    assignments: int
    exact: bool  # every assignment enumerated (else a sample)
    pairs: int
    mean0: float
    mean1: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def pairs_for(self, half_width: float) -> int:
        """Pairs of blocks that would give an interval of `half_width` (it shrinks as one over the
        square root of the number of pairs); at least as many as there are."""
        if not math.isfinite(self.half_width):
            return max(self.pairs, 2 * EXACT_PAIRS)  # unbounded: at least enough for a finite one
        return max(self.pairs, math.ceil(self.pairs * (self.half_width / half_width) ** 2))

    def gain(self) -> tuple[float, float, float]:
        """The relative gain of arm 1 (lower is better: 0.1 = its mean 10% below arm 0's) and its
        interval: 1 - exp of the estimate and of the interval's ends."""
        return 1 - math.exp(self.estimate), 1 - math.exp(self.high), 1 - math.exp(self.low)

    def to_dict(self) -> dict[str, Any]:
        return {"estimator": self.estimator, "shape": self.shape, "estimate": self.estimate, "low": self.low,
                "high": self.high, "p_value": self.p_value, "assignments": self.assignments,
                "exact": self.exact, "pairs": self.pairs, "mean0": self.mean0, "mean1": self.mean1}


def effect(b: Blocks, how: Estimator = "twin", shape: Shape = "twin", alpha: float = ALPHA,
           seed: int = 0) -> Effect:
    """Arm 1's effect by estimator `how`: the estimated log ratio of the arms' means, the
    p-value of the sharp null (arm 1 changed no block's figure), and the (1 - alpha) interval,
    the implied log ratios of every hypothesis of the family `shape` that the permutation test
    does not reject (see the module doc)."""
    arms, exact = assignments(b, seed)
    mu0, mu1 = arm_means(b, arms[:1], b.realized[None, :], how)
    zero = np.zeros(len(b.arm))
    obs = float(statistics(b, arms[:1], how, zero)[0])
    if not math.isfinite(obs):
        raise InputError("the effect is undefined: an arm measured no job (or the twin predicts 0 for it)")
    d = shape_of(b, shape)

    def p_value(theta: float) -> float:
        stat = np.abs(statistics(b, arms, how, theta + d))
        # an undefined statistic counts as extreme (conservative); a relative tolerance keeps
        # the observed assignment's own tie counted on every platform
        return float(np.mean(~(stat < abs(stat[0]) * (1 - 1e-9) - 1e-12)))

    def implied(theta: float) -> float:
        return implied_log_ratio(b, theta + d)

    # the hypothesis whose implied ratio is the estimate (the statistic's zero) is never rejected
    inside = _solve(lambda t: implied(t) - obs, obs - float(np.mean(d)))
    lo, hi = _edge(p_value, inside, -0.05, alpha), _edge(p_value, inside, 0.05, alpha)
    low = implied(lo) if math.isfinite(lo) else -math.inf
    high = implied(hi) if math.isfinite(hi) else math.inf
    return Effect(how, shape, obs, low, high, p_value_of(b, arms, how), len(arms), exact, b.pairs,
                  float(mu0[0]), float(mu1[0]))


def p_value_of(b: Blocks, arms: IntArray, how: Estimator) -> float:
    """The permutation p-value of the sharp null: arm 1 changed no block's figure."""
    stat = np.abs(statistics(b, arms, how, np.zeros(len(b.arm))))
    return float(np.mean(~(stat < abs(stat[0]) * (1 - 1e-9) - 1e-12)))


def _solve(f: Callable[[float], float], guess: float) -> float:
    """A root of the increasing function `f`, bracketed outward from `guess`, then bisected."""
    lo, hi, step = guess, guess, 0.05
    while f(lo) > 0:
        lo -= step
        step *= 2
    step = 0.05
    while f(hi) < 0:
        hi += step
        step *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _edge(p_value: Callable[[float], float], inside: float, step: float, alpha: float) -> float:
    """The last value from `inside` towards the sign of `step` where the test does not reject:
    steps out until it rejects (growing), then bisects."""
    lo, hi = inside, inside + step
    grow = 0
    while p_value(hi) > alpha:
        lo, hi = hi, hi + step * 2 ** grow
        grow += 1
        if abs(hi - inside) > MAX_LOG_RATIO:
            return math.copysign(math.inf, step)  # the test never rejects: no finite bound
    for _ in range(50):
        mid = (lo + hi) / 2
        if p_value(mid) > alpha:
            lo = mid
        else:
            hi = mid
        if abs(hi - lo) <= 1e-7:
            break
    return lo


def pair_effects(b: Blocks, how: Estimator = "twin") -> FloatArray:
    """The estimate of each pair of blocks on its own (NaN where an arm of the pair measured no
    job): what the plot of per-block effects draws."""
    out = np.full(b.pairs, np.nan)
    for k in range(b.pairs):
        m = b.pair == k
        sub = Blocks(b.arm[m], np.zeros(int(m.sum()), dtype=np.int64), b.jobs[m], b.realized[m], b.twin[m])
        if (sub.jobs[sub.arm == 0].sum() > 0) and (sub.jobs[sub.arm == 1].sum() > 0):
            out[k] = statistics(sub, sub.arm[None, :], how, np.zeros(len(sub.arm)))[0]
    return out
