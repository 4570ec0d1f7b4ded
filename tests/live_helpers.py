"""Hand-made sacct histories for the live agent's tests."""

from __future__ import annotations

import random
import time

HEADER = ("JobID|Submit|Start|End|AllocTRES|ReqTRES|User|Account|Partition|State|JobName|NCPUS|"
          "Timelimit")


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def row(job_id: str, submit: float, start: float | None, end: float | None, gpus: int,
        state: str | None = None, user: str = "alice", account: str = "physics",
        limit: str = "00:30:00", cpus: int = 1) -> str:
    tres = f"billing=4,cpu=1,gres/gpu={gpus},node=1"
    state = state or ("COMPLETED" if end is not None else "RUNNING" if start is not None else "PENDING")
    return "|".join([job_id, stamp(submit), stamp(start) if start is not None else "Unknown",
                     stamp(end) if end is not None else "Unknown",
                     tres if start is not None else "", tres, user, account, "gpu", state, "job",
                     str(cpus), limit])


# Where a test pins the fake cluster's clock (2026-12-03 12:13:20 UTC): a fixed moment, because
# sacct's whole-second times round each job differently as the wall clock's fraction moves, and a
# round then sometimes chooses otherwise.
PINNED_NOW = 1_796_300_000.0


def contended(now: float, n: int = 60, span: float = 1200.0, seed: int = 0) -> str:
    """`n` finished jobs of three users submitted over the last `span` s for an 8-GPU cluster,
    2 to 8 GPUs each: replayed, the queue is long and its order depends on the priority weights
    (the default config is 15% worse in avg JCT than the best of 30 random ones), so the tuner
    finds a winner. Every job has finished (no imputed durations): the rounds are deterministic."""
    rng = random.Random(seed)
    rows = [HEADER]
    for i in range(n):
        sub = now - span + i * (span - 100) / n
        g = rng.choice([2, 4, 6, 8])
        dur = min(rng.randint(20, 400), now - sub - 2)
        user = rng.choice(["alice", "bob", "carol"])
        rows.append(row(str(i + 1), sub, sub, sub + dur, g, user=user, account=user))
    return "\n".join(rows) + "\n"
