"""The bundled default sample: four weeks of the Microsoft Philly trace (CC BY 4.0).

All virtual clusters, jobs submitted in [2017-10-02, 2017-10-30) whose duration is at most two
days, the same rule as ``shared/traces/philly/slices``; ``submit_time`` counts from 2017-10-02
00:00 (a Monday). 45,548 jobs. On a uniform 32x8 cluster its offered load is about 0.8
(weekly 0.94, 0.71, 0.84, 0.71), so the scheduler's configuration matters.
Source: Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
Workloads", USENIX ATC '19, via the per-job CSV flattened by the Sia (SOSP '23) authors.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

SAMPLE_NAME = "philly_2017-10-02_28d.csv.gz"
SAMPLE_CLUSTER = "32x8"


def sample_path() -> Path:
    return Path(str(files("autosched.data") / SAMPLE_NAME))
