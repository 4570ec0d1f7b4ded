"""Hand-made sacct histories for the live agent's tests, and an agent over a fake cluster to run
them (`make`). The project is imported where a helper runs: tests/fixtures/make_old_state.py
imports the histories under the code of an older version."""

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
    tres = f"billing=4,cpu={cpus},gres/gpu={gpus},node=1"  # a job that asked for `cpus` CPUs
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


def make(tmp_path, sacct=None, pin=None, connector=None, **kw):
    """An agent over a fake 8-GPU cluster. With the default history, the cluster's clock is
    pinned to the moment the history ends: a round replays the last period (600 s) of jobs, so a
    round that started seconds later on a loaded machine would tune on other jobs. The moment is
    fixed, not the wall clock: sacct's whole-second times round each job differently as the
    clock's fraction moves, and one round in some tens then chose otherwise. `pin`: pin the clock
    there for a history given as `sacct` (or seeded) too. `connector`: a class to open the fake
    cluster with (a `FakeConnector` that fails in a way of its own). Propose mode replays the
    last period (one workload, deterministic); auto mode, which refuses evidence without a
    spread, samples the hybrid model (on the jobs' clock: the history's 20 minutes are 20 hours
    of a real cluster's jobs, as a test bed replays them)."""
    from autosched.live.agent import AgentSettings, init_agent
    from autosched.live.fake import FakeConnector

    now = PINNED_NOW
    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(now) if sacct is None
                                else sacct, nodes=1, gpus_per_node=8)
    if sacct is None or pin is not None:
        fake.update(clock=now if pin is None else pin)
    opts = dict(connector={"kind": "fake", "directory": str(tmp_path / "fake")}, period=600,
                history=3600, min_jobs=10, budget=12, model="replay", guard_margin=0.0, guard_k=0.0,
                rollback_margin=0.0)
    if kw.get("mode") == "auto":  # auto mode applies only on evidence with a spread: a few samples
        # (persistence 0: the scenarios these tests pose were worked out on samples at the
        # history's level; tests/test_level.py covers samples that follow the last hours)
        opts.update(model="hybrid", time_scale=60.0, samples=2, validation_samples=4, max_validation_samples=4,
                    persistence=0.0)
    opts.update(kw)
    conn = None if connector is None else connector(fake.dir)
    agent = init_agent(tmp_path / "state", AgentSettings(**opts), conn)
    return agent, fake if conn is None else conn


def proposed(agent):
    """The proposal of the agent's next round (which must propose)."""
    from autosched.live.round import Action

    out = agent.step()
    assert out.action is Action.PROPOSED, out
    return agent.store.get(out.revision)



# The judge, one period after a change, on a job running at the change (R), one queued (Q: the
# large job, 8 CPUs) and two arriving after it (A, B: 1 CPU), every job on the whole 8-GPU node
# (tests/test_live_judge.py works the same jobs out by hand, at whole seconds). The baseline's
# weights put Q first (age, and the job-size factor favouring large jobs), as does first come,
# first served: Q, A, B give average JCTs 450, 480, 570 -> 500 s; small first: A, B, Q give 180,
# 270, 650 -> 366.7 s. The change's time has a fraction of a second, the sacct times do not: t is
# the whole second it falls in, and nothing below starts or ends within that second.
SMALL_FIRST = {"PriorityWeightAge": 0, "PriorityWeightJobSize": 100000, "PriorityFavorSmall": True}


def period_rows(t: float, small_first: bool) -> str:
    """The jobs around a change at `t` as the cluster ran them (small first, or not)."""
    if small_first:
        q, a, b = (t + 300, t + 600), (t + 100, t + 200), (t + 200, t + 300)
    else:
        q, a, b = (t + 100, t + 400), (t + 400, t + 500), (t + 500, t + 600)
    return "\n".join([HEADER, row("R", t - 200, t - 100, t + 100, 8), row("Q", t - 50, *q, 8, cpus=8),
                      row("A", t + 20, *a, 8), row("B", t + 30, *b, 8)]) + "\n"


def apply_change(agent, config) -> float:
    """Apply `config` over the running revision, by hand; returns when it went live."""
    from autosched.live.records import Evidence

    p = agent.store.create(dict(agent.view.running_or_baseline().config, **config), trigger="period",
                           actor="t", evidence=Evidence(predicted_gain=0.1))
    agent.approve(p.id, "operator:alice")
    return agent.store.get(p.id).applied_at


def replay_gains(o) -> list[float]:
    """The change's gain on the average JCT in each replay an outcome stored."""
    pairs = [(o.simulated_old, o.simulated_new), *o.copies]
    return [(old["avg_jct"] - new["avg_jct"]) / old["avg_jct"] for old, new in pairs]



class FakeTime:
    """A clock that the loop's sleeps advance (no real waiting)."""

    def __init__(self):
        self.t = 0.0
        self.sleeps: list[float] = []

    def clock(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


def slurm_settings(bed, **kw):
    """An agent's settings on the Slurm test cluster `bed` (tests/testbed.py): short Slurm
    timeouts, a one-minute period, the replay model; `kw` overrides."""
    from autosched.live.settings import AgentSettings

    opts = dict(connector={"kind": "slurm", "slurm_conf": str(bed.conf), "include": str(bed.include),
                           "timeout": 5.0, "retries": 1, "backoff": 0.5},
                period=60, history=3600, min_jobs=1000, budget=4, model="replay")
    opts.update(kw)
    return AgentSettings(**opts)


def show_config(bed, key: str) -> str:
    """`key`'s value as `scontrol show config` on the test cluster `bed` shows it."""
    for line in bed.run("scontrol", "show", "config").stdout.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    raise KeyError(key)


_INTENT = """
import sys
from autosched.live.store import RevisionStore
RevisionStore(sys.argv[1]).begin_apply(int(sys.argv[2]), actor="operator:gone",
                                       previous={"include": None})
"""


def leave_an_apply_open(agent, rev_id: int) -> None:
    """An apply of `rev_id` begun by a process that is gone: its write-ahead intent stays open
    in the store, as a kill -9 in the middle of an apply leaves it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    subprocess.run([sys.executable, "-c", _INTENT, str(agent.state_dir), str(rev_id)], check=True,
                   env={**os.environ, "PYTHONPATH": src})
