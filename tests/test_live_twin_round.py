"""The twin in the agent's round, on the fake connector: the cluster's setup is read once a round
(in observe; a failed read is a block like any other), recorded with the round with what changed
since the setup recorded before, shown by `agent status` (text, JSON, API, page) with what the
twin leaves out; a controller memory left on another setup is not used; drift polls read neither
the setup nor the seed file again; `agent twin` only reads; `agent init` checks the seed file
before writing anything and says what the twin leaves out."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autosched.associations import Association
from autosched.cli import build_app
from autosched.live.agent import AgentSettings, init_agent
from autosched.live.errors import LiveError, SlurmUnavailable
from autosched.live.fake import FakeConnector
from autosched.live.history import SeedHistory, read_seed
from autosched.live.round import EXIT_RETRYING, Action
from autosched.live.twin import ClusterSetup, PartitionSetup
from live_helpers import HEADER, PINNED_NOW, contended, leave_an_apply_open, row

SRC = str(Path(__file__).resolve().parents[1] / "src")
NOW = PINNED_NOW
# one 8-GPU node; contended's jobs are charged to accounts named as their users
TREE = (Association("root"), *(Association(a, "", "root", s) for a, s in (("alice", 60), ("bob", 30), ("carol", 10))),
        *(Association(a, a, a) for a in ("alice", "bob", "carol")))
SETUP = ClusterSetup((("n1", 8),), (PartitionSetup("gpu", ("n1",), 1, (("GRES/gpu", 4.0),), 1, True),), TREE)


def make(tmp_path, setup=SETUP, **kw):
    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(NOW), nodes=1, gpus_per_node=8, setup=setup)
    fake.update(clock=NOW)
    # budget 12, as in test_live_agent: the first trials are the running config and multifactor's
    # archetypes, none better on `contended`; the design after them finds a winner
    opts = dict(connector={"kind": "fake", "directory": str(tmp_path / "fake")}, period=600,
                history=3600, min_jobs=10, budget=12, model="replay", guard_margin=0.0, guard_k=0.0,
                rollback_margin=0.0)
    opts.update(kw)
    return init_agent(tmp_path / "state", AgentSettings(**opts)), fake


def calls(fake, what="scontrol show partition"):
    return sum(c == what for c in fake.state()["calls"])


def cli(*args):
    return CliRunner().invoke(build_app(), [str(a) for a in args])


def test_a_round_reads_the_setup_once_and_tunes_on_it(tmp_path):
    agent, fake = make(tmp_path)
    built = []
    new = agent.tuning.new_controller
    agent.tuning.new_controller = lambda running, setup: built.append((setup, new(running, setup))) or built[-1][1]
    out = agent.step()
    assert out.action is Action.PROPOSED, out
    assert calls(fake) == 1  # observe read it; the tuning used that read
    assert len(built) == 1 and built[0][0] == SETUP and built[0][1].cluster == SETUP.cluster_spec()
    assert out.setup == SETUP and out.setup_changes == ()


def test_a_setup_that_cannot_be_read_blocks_the_round_as_other_reads_do(tmp_path):
    agent, fake = make(tmp_path)

    def down():
        raise SlurmUnavailable("`scontrol show partition` could not reach Slurm: timeout")

    agent.connector.setup = down
    out = agent.step()
    assert (out.action, out.retry_after, out.exit_code) == (Action.BLOCKED, 30.0, EXIT_RETRYING)
    assert out.why == "Slurm does not answer: `scontrol show partition` could not reach Slurm: timeout"
    assert agent.store.flags().blocked == out.why and out.setup is None and out.history is None
    assert agent.step().retry_after == 60.0  # the back-off doubles, as for the other reads

    def bad():
        raise LiveError("cluster: no node has GPUs (Gres=gpu:N)")

    agent.connector.setup = bad
    out = agent.step()
    assert (out.action, out.retry_after) == (Action.BLOCKED, None)
    assert out.why == "cannot read the cluster's setup: cluster: no node has GPUs (Gres=gpu:N)"


def test_each_round_records_its_setup_and_what_changed_since_the_last_one_read(tmp_path):
    agent, fake = make(tmp_path, min_jobs=1000)  # every round stops at "too little history"
    first = agent.step().to_summary()
    assert ClusterSetup.from_dict(first["setup"]) == SETUP and first["setup_changes"] == []
    # an operator gives physics... here alice 70 shares and adds dave; then Slurm is down for a
    # round (it reads no setup); the round after compares with the last setup recorded
    changed = replace(SETUP, associations=tuple(replace(a, shares=70) if (a.account, a.user) == ("alice", "")
                                                else a for a in TREE) + (Association("dave", "", "root", 5),))
    fake.set_setup(changed)
    fake.update(down=True)
    blocked = agent.step().to_summary()
    assert blocked["action"] == "blocked" and "setup" not in blocked
    fake.update(down=False)
    second = agent.step().to_summary()
    assert second["setup_changes"] == ["account dave added (shares 5, parent root)", "account alice: shares 60 -> 70"]
    assert ClusterSetup.from_dict(second["setup"]) == changed
    assert agent.step().to_summary()["setup_changes"] == []  # the next round: nothing new

    # the status shows the newest round's setup: through the record, the CLI, its JSON
    fake.set_setup(SETUP)
    agent.step()
    twin = agent.status().twin
    assert twin.changes == ("account dave removed", "account alice: shares 70 -> 60")
    assert twin.warnings == () and twin.left_out == {}
    r = cli("agent", "status", "--state", agent.state_dir)
    assert r.exit_code == 0, r.output
    assert "  changed: account dave removed" in r.output.splitlines()
    r = cli("agent", "status", "--json", "--state", agent.state_dir)
    assert json.loads(r.output)["twin"]["changes"] == ["account dave removed", "account alice: shares 70 -> 60"]


def test_status_says_what_the_twin_leaves_out_and_which_jobs(tmp_path):
    # QOS weighted and differing: the twin leaves the QOS factor out; carol is not in the tree
    # any more: her jobs are left out of the twin, counted in the round and shown
    qos = replace(SETUP, qos=(("normal", 0), ("high", 100)), weights=(("PriorityWeightQOS", 1000),),
                  associations=tuple(a for a in TREE if a.account != "carol"))
    agent, fake = make(tmp_path, setup=qos, min_jobs=1000)
    out = agent.step()
    carol = contended(NOW).count("|carol|carol|")
    assert out.history.left_out == {"association (account/user) not in the cluster's tree": carol}
    assert out.history.jobs == 60 - carol
    warning = qos.warnings()[0]
    assert warning.startswith("the twin leaves out the QOS factor: PriorityWeightQOS=1000")
    st_ = agent.status().twin
    assert st_.warnings == (warning,)
    lines = cli("agent", "status", "--state", agent.state_dir).output.splitlines()
    assert any(ln.startswith("cluster setup read ") and ln.endswith("Z: no change seen") for ln in lines), lines
    assert f"warning: {warning}" in lines
    assert f"  {carol} job(s) of the history left out of the twin: association (account/user) not in " \
           "the cluster's tree" in lines


def test_the_api_and_the_page_show_the_setup(tmp_path):
    from autosched.client import Client
    from service_kit import TOKEN, make_app, serve_in_thread

    agent, fake = make(tmp_path, setup=replace(SETUP, qos=(("a", 0), ("b", 9)), weights=(("PriorityWeightQOS", 5),)),
                       min_jobs=1000)
    agent.step()
    fake.set_setup(replace(fake.setup(), priority_flags=("NO_FAIR_TREE",)))
    agent.step()
    with serve_in_thread(make_app(agent.state_dir)) as url:
        st_ = Client(url, token=TOKEN).status()
        import urllib.request

        with urllib.request.urlopen(url + "/", timeout=30) as r:
            html = r.read().decode()
    assert st_["twin"]["changes"] == ["PriorityFlags (none) -> NO_FAIR_TREE"]
    assert st_["twin"]["warnings"][0].startswith("the twin leaves out the QOS factor")
    assert "<li class=setup-change>changed: PriorityFlags (none) -&gt; NO_FAIR_TREE</li>" in html
    assert "<li class=twin-warning>the twin leaves out the QOS factor: PriorityWeightQOS=5" in html


def test_a_memory_left_on_another_setup_is_not_used(tmp_path):
    agent, fake = make(tmp_path)
    assert agent.step().action is Action.PROPOSED
    assert agent.memory(SETUP) is not None
    bigger = replace(SETUP, nodes=(("n1", 8), ("n2", 8)))
    assert agent.memory(bigger) is None  # its trials were simulated on one node
    assert agent.memory(replace(SETUP, qos=(("normal", 0),))) is not None  # the same simulated cluster
    assert agent.memory() is not None and agent.memory().rounds == 1
    # the next round, on the bigger cluster, starts afresh: its memory counts one round
    agent.reject(2, "operator:alice")
    fake.set_setup(bigger)
    assert agent.step().setup_changes == ("node n2 added (8)",)
    assert agent.memory().rounds == 1
    if (pending := agent.store.pending()) is not None:  # (its winner may be the config rejected)
        agent.reject(pending.id, "operator:alice")
    agent.step()  # and the round after goes on from it
    assert agent.memory().rounds == 2


def seed_rows(n: int, end: float) -> list[str]:
    return [row(f"s{i}", end - 3000 + 10 * i, end - 3000 + 10 * i, end - 2900 + 10 * i, 2) for i in range(n)]


def test_drift_polls_read_neither_the_setup_nor_the_seed_again(tmp_path):
    seed = tmp_path / "seed.txt"
    seed.write_text("\n".join([HEADER, *seed_rows(5, NOW)]) + "\n")
    agent, fake = make(tmp_path, seed_history=str(seed))
    assert agent.step().action is Action.PROPOSED
    assert agent.memory().reference is not None  # so drifted() reads the history
    before = calls(fake)
    sacct = calls(fake, "sacct")
    for _ in range(3):
        agent.drifted()
    assert calls(fake, "sacct") == sacct + 3 and calls(fake) == before  # the recorded setup
    assert agent.view.seed.reads == 1
    seed.write_text("\n".join([HEADER, *seed_rows(6, NOW)]) + "\n")  # a new file: read again
    os.utime(seed, ns=(1, 1))
    agent.drifted()
    assert agent.view.seed.reads == 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.floats(0, 3000), later=st.floats(0, 3000), grow=st.floats(0, 3000))
def test_a_cached_seed_serves_later_windows_as_a_fresh_read_does(tmp_path, first, later, grow):
    # windows that start and end no earlier than the one read: the same jobs as reading the file
    seed = tmp_path / "seed.txt"
    seed.write_text("\n".join([HEADER, *seed_rows(300, NOW)]) + "\n")
    cache = SeedHistory(seed)
    a = cache.jobs(NOW - 3000 + first, NOW)
    b = cache.jobs(NOW - 3000 + first + later, NOW + grow)
    want = read_seed(seed, NOW - 3000 + first + later, NOW + grow)
    assert cache.reads == 1 and len(a) >= len(b)
    assert b.job_id.tolist() == want.job_id.tolist() and np.array_equal(b.submit, want.submit)
    assert b.malformed == want.malformed
    cache.jobs(NOW - 3000 + first - 1, NOW + grow)  # an earlier start needs the file again
    assert cache.reads == 2


def test_agent_twin_only_reads(tmp_path):
    agent, fake = make(tmp_path)
    p = agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=5),
                           trigger="manual", actor="t")
    leave_an_apply_open(agent, p.id)
    files = {f.name: f.read_bytes() for f in agent.state_dir.iterdir()}
    fake.update(calls=[])
    r = cli("agent", "twin", "--state", agent.state_dir, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["jobs"] == 60
    # the interrupted apply is still open (a read does not reconcile: no restore was asked of
    # Slurm), and not a file of the state directory changed
    assert agent.store.open_apply() is not None and "restore" not in " ".join(fake.state()["calls"])
    assert {f.name: f.read_bytes() for f in agent.state_dir.iterdir()} == files
    (agent.state_dir / "state.db").unlink()
    for wal in agent.state_dir.glob("state.db-*"):
        wal.unlink()
    assert cli("agent", "twin", "--state", agent.state_dir).exit_code == 0
    assert not (agent.state_dir / "state.db").exists()  # no store was opened


def test_init_checks_the_seed_before_writing_anything(tmp_path):
    FakeConnector.create(tmp_path / "fake")
    state = tmp_path / "state"
    for bad, said in (("/dev/zero", "/dev/zero: "), (str(tmp_path / "seed.csv"), f"{tmp_path / 'seed.csv'}: line 1: ")):
        if bad.endswith(".csv"):
            Path(bad).write_text("a,b\n1,2\n")
        r = cli("agent", "init", "--state", state, "--fake", tmp_path / "fake", "--seed-history", bad)
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {said}"), r.output
        assert not state.exists()


def test_init_says_what_the_twin_leaves_out(tmp_path):
    setup = replace(SETUP, qos=(("normal", 0), ("high", 100)), weights=(("PriorityWeightQOS", 1000),))
    FakeConnector.create(tmp_path / "fake", setup=setup)
    r = cli("agent", "init", "--state", tmp_path / "state", "--fake", tmp_path / "fake")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == f"warning: {setup.warnings()[0]}"
    FakeConnector(tmp_path / "fake").update(down=True)
    r = cli("agent", "init", "--state", tmp_path / "state2", "--fake", tmp_path / "fake")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1].startswith("warning: cannot read the cluster's setup yet (`scontrol")


def test_init_lists_the_fixed_knobs_as_the_twin_of_this_cluster_holds_them(tmp_path):
    """PriorityFlags as the cluster sets it (NO_FAIR_TREE: classic), and the billing knobs said
    to be unused when every partition bills by its own TRESBillingWeights."""
    setup = replace(SETUP, priority_flags=("NO_FAIR_TREE",))
    FakeConnector.create(tmp_path / "fake", setup=setup)
    r = cli("agent", "init", "--state", tmp_path / "state", "--fake", tmp_path / "fake")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[1] == ("fixed in live mode (no Slurm setting): placement=consolidate, "
                        "PriorityFlags=NO_FAIR_TREE, backfill=True, reserve_after=21600.0, "
                        "sched_interval=60, default_queue_depth=100, batch_sched_delay=3")
    assert lines[2] == ("not used on this cluster: TRESBillingWeights.GRES/gpu, TRESBillingWeights.CPU "
                        "(every partition bills its jobs by its own TRESBillingWeights; `agent twin` "
                        "lists them)")
    # one pool: the billing knobs bill every job, and are listed with their values
    FakeConnector.create(tmp_path / "pool")
    r = cli("agent", "init", "--state", tmp_path / "state2", "--fake", tmp_path / "pool")
    assert r.exit_code == 0, r.output
    assert "TRESBillingWeights.GRES/gpu=1.0, TRESBillingWeights.CPU=0.0" in r.output.splitlines()[1]
    assert "not used on this cluster" not in r.output
