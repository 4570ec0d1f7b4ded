"""Has the arriving workload moved away from the one the running config was tuned for?

Three tests compare the last day (``recent``) with the window the running config was tuned on
(``reference``). Each needs both statistical significance (p < ``alpha``) and a size of effect
that matters (with thousands of jobs a day, any difference is significant):

- arrivals: Poisson rate-ratio test (conditional binomial, normal approximation on the log ratio:
  var(log(r1/r2)) = 1/n1 + 1/n2); drift when the rate moved by more than ``rate_factor``×;
- job durations: two-sample Kolmogorov-Smirnov test on log duration; drift when D > ``ks_d``.
  Only *completed* jobs are compared (durations of running jobs are unknown); in a steady state the
  durations of jobs completing in a window are distributed like those of arriving jobs;
- GPU mix: chi-square test of homogeneity over GPU-count classes (1, 2-4, 5-8, >8); drift when
  the total-variation distance between the mixes exceeds ``mix_tv``.

Only numpy is used (the p-values use the usual asymptotic distributions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import AdaptError
from .observe import GPU_CLASSES, Observation, gpu_class

GPU_CLASS_NAMES = ("1", "2-4", "5-8", ">8")


@dataclass(frozen=True)
class Profile:
    """The workload of a window, reduced to what the drift tests compare."""

    start: float
    end: float
    arrivals: int
    log_durations: np.ndarray  # of jobs that completed in the window
    gpu_mix: np.ndarray  # counts per GPU class of jobs that arrived in the window


def profile(obs: Observation, start: float, end: float) -> Profile:
    """The profile of jobs that arrived (for rate and mix) or completed (for durations) in [start, end]."""
    h = obs.history
    arrived = (h.submit_time >= start) & (h.submit_time <= end)
    completed = obs.finished & (obs.end >= start) & (obs.end <= end)
    return Profile(start, end, int(arrived.sum()), np.log(np.maximum(h.duration[completed], 1.0)),
                   gpu_classes(h.num_gpus[arrived]))


def gpu_classes(gpus: np.ndarray) -> np.ndarray:
    return np.bincount(gpu_class(gpus), minlength=len(GPU_CLASSES) + 1)


@dataclass(frozen=True)
class DriftTest:
    alpha: float = 1e-3
    rate_factor: float = 1.5
    ks_d: float = 0.15
    mix_tv: float = 0.15
    min_jobs: int = 30  # fewer jobs in either window: no verdict on that test

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1 or self.rate_factor <= 1 or not 0 < self.ks_d < 1 or not 0 < self.mix_tv < 1:
            raise AdaptError("drift test: need 0<alpha<1, rate_factor>1, 0<ks_d<1, 0<mix_tv<1")

    def compare(self, recent: Profile, reference: Profile) -> "DriftReport":
        found: list[str] = []
        stats: dict[str, float] = {}
        n1, n2 = recent.arrivals, reference.arrivals
        if n1 >= self.min_jobs and n2 >= self.min_jobs:
            ratio, p = rate_ratio_test(n1, recent.end - recent.start, n2, reference.end - reference.start)
            stats.update(rate_ratio=ratio, rate_p=p)
            if p < self.alpha and not 1 / self.rate_factor <= ratio <= self.rate_factor:
                found.append(f"arrival rate x{ratio:.2f} (rate-ratio test p={p:.1e})")
            tv, p = mix_test(recent.gpu_mix, reference.gpu_mix)
            stats.update(mix_tv=tv, mix_p=p)
            if p < self.alpha and tv > self.mix_tv:
                found.append(f"GPU mix moved by TV {tv:.2f} (chi-square p={p:.1e})")
        if min(len(recent.log_durations), len(reference.log_durations)) >= self.min_jobs:
            d, p = ks_2samp(recent.log_durations, reference.log_durations)
            stats.update(ks_d=d, ks_p=p)
            if p < self.alpha and d > self.ks_d:
                found.append(f"log-duration KS D={d:.2f} (p={p:.1e})")
        return DriftReport(bool(found), "; ".join(found), stats)


@dataclass(frozen=True)
class DriftReport:
    drifted: bool
    reason: str
    stats: dict[str, float] = field(default_factory=dict)


def rate_ratio_test(n1: int, t1: float, n2: int, t2: float) -> tuple[float, float]:
    """Ratio of Poisson rates n1/t1 over n2/t2 and the two-sided p-value of 'equal rates'."""
    ratio = (n1 / t1) / (n2 / t2)
    z = math.log(ratio) / math.sqrt(1 / n1 + 1 / n2)
    return ratio, math.erfc(abs(z) / math.sqrt(2))


def ks_2samp(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sample KS statistic and its asymptotic p-value (Kolmogorov distribution)."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a)
                            - np.searchsorted(b, grid, side="right") / len(b))))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    return d, _kolmogorov_sf(lam)


def _kolmogorov_sf(lam: float) -> float:
    if lam < 0.2:
        return 1.0
    s = sum(2 * (-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return min(1.0, max(0.0, s))


def mix_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Total-variation distance between two count vectors, and the chi-square homogeneity p-value."""
    table = np.vstack([a, b]).astype(np.float64)
    table = table[:, table.sum(axis=0) > 0]
    tv = 0.5 * float(np.abs(table[0] / table[0].sum() - table[1] / table[1].sum()).sum())
    if table.shape[1] < 2:
        return tv, 1.0
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    return tv, _chi2_sf(chi2, table.shape[1] - 1)


def _chi2_sf(x: float, k: int) -> float:
    # Wilson-Hilferty: (x/k)^(1/3) is close to normal; accurate enough for a threshold at 1e-3.
    if x <= 0:
        return 1.0
    z = ((x / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))
