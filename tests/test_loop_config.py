"""The loop's settings: one record (`LoopConfig`) checked once, shared by `autosched run`
(`Settings`) and the live agent (`AgentSettings`, saved nested in settings.json; flat files from
before still load), one option group for both commands, and the checks `agent init` makes before
it writes anything."""

from __future__ import annotations

import json
import math
import os
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autosched.adapt import Controller, Guardrail, LoopConfig, ModelSource, Settings, observe
from autosched.adapt.config import LOOP_FIELDS
from autosched.adapt.controller import default_tuner_factory
from autosched.adapt.setting import settings_of
from autosched.cli import build_app
from autosched.cli.common import loop_flags
from autosched.cluster import ClusterSpec
from autosched.errors import InputError
from autosched.live.agent import init_agent, open_agent
from autosched.live.errors import LiveError
from autosched.live.fake import FakeConnector
from autosched.live.settings import SETTINGS_FILE, AgentSettings
from autosched.policies.tiresias import Tiresias
from autosched.sim import Simulator
from live_helpers import PINNED_NOW, contended
from test_adapt_doubles import DAY, synthetic_trace

FIXTURES = Path(__file__).parent / "fixtures"
runner = CliRunner()


def cli(*args):
    return runner.invoke(build_app(), [str(a) for a in args])


def one_error(res) -> str:
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.output, res.output
    return lines[0][len("error: "):]


# ------------------------------------------------------------------ one record, two surfaces

# What the agent's loop does differently from `autosched run`'s, on purpose (AgentSettings says why).
LIVE = {"policy": "multifactor", "period": 86400.0, "budget": 20, "samples": 3, "guard_k": 2.0,
        "guard_margin": 0.02, "drift": True, "persistence": 0.4}


def test_run_and_the_agent_share_the_loop_settings_and_differ_only_in_the_named_live_defaults():
    run = Settings().loop_values()
    assert run == LoopConfig().loop_values()
    assert run["guard_k"] == 1.0 and run["guard_margin"] == 0.01 and run["period"] == 7 * DAY
    agent = AgentSettings(connector={"kind": "fake", "directory": "/x"}).loop_values()
    assert {k: v for k, v in agent.items() if run[k] != v} == LIVE
    assert set(LOOP_FIELDS) <= {f.name for f in fields(Settings)} & {f.name for f in fields(AgentSettings)}


def test_adding_a_loop_setting_means_one_declared_field():
    """Every LoopConfig field is declared (`setting`: default, help, flag, range), and each one
    with a flag has exactly one option in the group both commands use, made from it."""
    declared = settings_of(LoopConfig)
    assert list(declared) == list(LOOP_FIELDS) and all(s.help for s in declared.values())
    assert [f.field for f in loop_flags()] == [k for k, s in declared.items() if s.flags]
    assert [k for k, s in declared.items() if not s.flags] == ["carry_backlog"]  # Python only
    decls = [d for f in loop_flags() for decl in (*f.decls, *f.hidden) for d in decl.split("/")]
    assert len(decls) == len(set(decls))
    import typer.main

    app = build_app()
    run = typer.main.get_command(app).commands["run"]
    init = typer.main.get_command(app).commands["agent"].commands["init"]
    for command in (run, init):
        opts = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        assert set(decls) <= opts, set(decls) - opts


def test_the_option_defaults_are_each_command_s_settings_defaults():
    import inspect

    from autosched.cli.agent_cmd import init_cmd
    from autosched.cli.run_cmd import run_cmd

    for command, cls, want in ((run_cmd, Settings, {"period": "7d", "guard_margin": 0.01, "drift": False}),
                               (init_cmd, AgentSettings, {"period": "1d", "guard_margin": 0.02, "drift": True})):
        params = inspect.signature(command).parameters
        assert {k: params[k].default.default for k in want} == want, cls


@pytest.mark.parametrize("change, message", [
    ({"period": "abc"}, "period 'abc': must be a number"),
    ({"period": math.nan}, "period nan: must be finite"),
    ({"budget": 2.5}, "budget 2.5: must be an integer"),
    ({"budget": True}, "budget True: must be an integer"),
    ({"drift": "yes"}, "drift 'yes': must be true or false"),
    ({"guard_max_loss": "0.1"}, "guard max loss '0.1': must be a number"),
    ({"period": -5.0}, "period and history must be longer than 0 (got period -5 s, history 604800 s)"),
    ({"history": 367 * DAY}, "history of 367 days is beyond the 366-day limit of one workload sample"),
    ({"history": 3_000_000 * DAY}, "history of 3,000,000 days is beyond the 366-day limit"),
    ({"seed": -1}, "seed -1: must be in [0, 4294967295]"),
    ({"policy": "lottery"}, "unknown policy 'lottery'"),
    ({"model": "crystal"}, "unknown workload model 'crystal'"),
    ({"metric": "speed"}, "objective: unknown metric 'speed'"),
    ({"guard_k": -1.0}, "guard k -1.0: must be at least 0"),
    ({"guard_max_loss": -0.5}, "guard max loss -0.5: must be at least 0"),
    ({"samples": 0}, "samples 0: must be at least 1"),
    ({"budget": 0}, "budget 0: must be at least 1"),
    ({"queue_k": -1.0}, "queue k -1.0: must be at least 0"),
    ({"queue_k": math.nan}, "queue k nan: must be finite"),
    ({"queue_k": math.inf}, "queue k inf: must be finite"),
    ({"queue_k": "1"}, "queue k '1': must be a number"),
    ({"queue_k": None}, "queue k None: must be a number"),
    ({"persistence": 1.5}, "persistence 1.5: must be in [0, 1]"),
    ({"persistence": float("nan")}, "persistence nan: must be finite"),
])
def test_a_bad_loop_setting_is_refused_with_its_name(change, message):
    for cls, extra in ((LoopConfig, {}), (Settings, {}), (AgentSettings, {"connector": {"kind": "fake", "directory": "/x"}})):
        with pytest.raises(InputError) as e:  # AdaptError, or the policy's, model's or objective's own
            cls(**extra, **change)
        assert message in str(e.value), cls


def test_run_json_keeps_the_order_and_shape_of_its_settings():
    d = Settings().to_dict()
    assert list(d) == ["policy", "period", "history", "budget", "oracle_budget", "samples", "validation_samples",
                       "level_sd", "model", "with_replay", "metric", "seed", "drift", "check_every", "first_decision",
                       "early_rounds", "guard_k", "guard_margin", "guard_max_loss", "carry_backlog",
                       "backlog_history", "search", "execution", "persistence", "trigger", "frame_running", "portfolio", "max_validation_samples",
                       "account_tolerance", "size_tolerance", "queue_tolerance", "queue_k", "fairshare_floor", "pins",
                       "search_policy", "milder", "cumulative_policy"]
    assert d["search"] == {"budget": 16, "seed": 0, "sampler": "tpe", "screening": False, "initial_design": None,
                           "patience": 5, "subspace": None}
    assert d["oracle_budget"] == 160


# ------------------------------------------------------------------ the controller takes the record

def test_the_controller_takes_a_policy_class_as_well_as_a_name():
    """A class (a view of a policy, here Tiresias with `queues` held at 1) is what the tuner gets
    and what the controller validates configs in; the guardrail evaluates under the policy's name."""
    from autosched.space import Subspace

    space = Tiresias.space.restrict(Subspace.of(pinned={"queues": 1}))
    narrow = type("Tiresias", (Tiresias,), {"space": space})
    got = []

    def factory(policy, *rest):
        got.append(policy)
        return default_tuner_factory(policy, *rest)

    tr = synthetic_trace(days=4, per_day=80, seed=2)
    cl = ClusterSpec.uniform_nodes(1, 4)
    sim = Simulator(tr, cl, Tiresias()).run(until=2 * DAY)
    ctrl = Controller(LoopConfig(period=DAY, budget=3, samples=2, validation_samples=2), cl,
                      ModelSource("stat", 2, validation_samples=2), policy=narrow, tuner_factory=factory)
    assert ctrl.running["queues"] == 1 and ctrl.policy_name == "tiresias"
    d = ctrl.decide(observe(sim, 2 * DAY, 0))
    assert got == [narrow] and d.candidate is not None and d.candidate["queues"] == 1
    assert ctrl.config.policy == "tiresias"
    with pytest.raises(Exception, match="queues"):
        Controller(LoopConfig(period=DAY), cl, ModelSource("stat", 2), policy=narrow, initial_config={"queues": 3})


# ------------------------------------------------------------------ settings.json

def test_a_flat_settings_file_written_before_the_loop_was_nested_loads():
    """Both files were written by `agent init` as it was before (fake and Slurm connectors)."""
    fake = AgentSettings.from_json(json.loads((FIXTURES / "agent_settings_flat_fake.json").read_text()), "f")
    assert (fake.period, fake.history, fake.mode, fake.min_jobs, fake.budget, fake.samples) == (600.0, 172800.0, "auto", 20, 12, 2)
    assert (fake.validation_samples, fake.guard_margin, fake.guard_k, fake.model) == (6, 0.03, 2.0, "replay")
    assert (fake.bounds, fake.max_step, fake.fixed, fake.backlog_history) == (
        {"PriorityWeightAge": [0.0, 5000.0]}, 0.5, {"placement": "spread"}, False)
    assert fake.connector == {"kind": "fake", "directory": "/tmp/loopfx/fake"}
    slurm = AgentSettings.from_json(json.loads((FIXTURES / "agent_settings_flat_slurm.json").read_text()), "s")
    assert slurm.connector["timeout"] == 12.0 and slurm.seed_history == "/tmp/loopfx/slurm.conf"
    # written before the samples followed the last hours: it samples as it did
    assert slurm.loop_values() == {**LoopConfig().loop_values(), **LIVE, "persistence": 0.0}
    new = AgentSettings(connector={"kind": "fake", "directory": "/x"})
    assert AgentSettings.from_json(new.to_json(), "s.json").persistence == 0.4


def test_a_settings_file_from_when_one_margin_did_both_jobs_rolls_back_at_that_margin():
    """Written before the rollback margin was a setting of its own: the guardrail's margin (5%
    here) was also the loss that rolled a change back, and still is for that agent; a new agent
    rolls back at its own (2%), whatever its guardrail's."""
    old = AgentSettings.from_json({"connector": {"kind": "fake", "directory": "/x"},
                                   "loop": {"guard_margin": 0.05}}, "settings.json")
    assert (old.guard_margin, old.rollback_margin) == (0.05, 0.05)
    flat = AgentSettings.from_json({"connector": {"kind": "fake", "directory": "/x"}, "margin": 0.04}, "s.json")
    assert flat.rollback_margin == 0.04
    new = AgentSettings(connector={"kind": "fake", "directory": "/x"}, guard_margin=0.05)
    assert new.rollback_margin == 0.02 and AgentSettings.from_json(new.to_json(), "s.json") == new


def test_a_flat_settings_file_with_a_webhook_loads_it_and_a_bad_url_is_refused():
    """A flat file as `agent init --notify` wrote it before the loop's settings were nested: the
    URL is a live setting, checked as `agent init` checks it."""
    data = json.loads((FIXTURES / "agent_settings_flat_fake.json").read_text())
    data["notify"] = "https://hooks.example.org/T1"
    assert AgentSettings.from_json(data, "f").notify == "https://hooks.example.org/T1"
    assert AgentSettings.from_json({**data, "notify": None}, "f").notify is None
    for bad, message in (("ftp://example.org/x", "notify URL 'ftp://example.org/x': give an http:// or https:// URL"),
                         (5, "notify 5: must be text")):
        with pytest.raises(LiveError) as e:
            AgentSettings.from_json({**data, "notify": bad}, "s/settings.json")
        assert str(e.value).startswith(f"s/settings.json: {message}")


def test_settings_are_saved_nested_and_read_back_the_same(tmp_path):
    s = AgentSettings(connector={"kind": "fake", "directory": "/x"}, period=600.0, guard_k=0.5, bounds={
        "PriorityWeightAge": [10.0, 100.0]}, fixed={"placement": "spread"})
    s.save(tmp_path)
    saved = json.loads((tmp_path / SETTINGS_FILE).read_text())
    assert set(saved) == {"connector", "mode", "min_jobs", "bounds", "max_step", "fixed", "seed_history",
                          "rollback_margin", "max_twin_error", "notify", "time_scale", "cooldown", "brake",
                          "verdict_wait", "loop"}
    assert saved["loop"]["guard_k"] == 0.5 and set(saved["loop"]) == set(LOOP_FIELDS)
    assert AgentSettings.load(tmp_path) == s


_loop_values = st.fixed_dictionaries({
    "period": st.floats(60, 366 * DAY), "history": st.floats(1, 366 * DAY), "budget": st.integers(1, 100),
    "samples": st.integers(1, 20), "validation_samples": st.integers(2, 30), "level_sd": st.floats(0, 2),
    "model": st.sampled_from(["stat", "replay", "hybrid"]), "with_replay": st.booleans(),
    "metric": st.sampled_from(["avg_jct", "p99_jct", "avg_queue"]), "seed": st.integers(0, 2**32 - 1),
    "drift": st.booleans(), "guard_k": st.floats(0, 5), "guard_margin": st.floats(0, 0.5),
    "guard_max_loss": st.none() | st.floats(0, 1), "screening": st.booleans(), "backlog_history": st.booleans()})


@settings(max_examples=60, deadline=None)
@given(_loop_values, st.sampled_from(sorted(LOOP_FIELDS)), st.sampled_from(["abc", None, [1], {"a": 1}, math.inf]))
def test_any_settings_round_trip_and_any_wrong_value_is_one_error_naming_the_file(loop, field, bad):
    s = AgentSettings(connector={"kind": "fake", "directory": "/x"}, **loop)
    data = json.loads(json.dumps(s.to_json()))
    assert AgentSettings.from_json(data, "x") == s
    if bad is None and field in ("guard_max_loss", "account_tolerance", "size_tolerance", "queue_tolerance",
                                 "fairshare_floor", "max_validation_samples"):
        return  # None is a valid max loss, and turns a constraint off (the floor: its default)
    data["loop"][field] = bad
    with pytest.raises(LiveError, match=r"^state/settings\.json: "):
        AgentSettings.from_json(data, "state/settings.json")


def _agent(tmp_path, **kw):
    FakeConnector.create(tmp_path / "fake", sacct=contended(PINNED_NOW), nodes=1, gpus_per_node=8)
    return init_agent(tmp_path / "state", AgentSettings(connector={"kind": "fake", "directory": str(tmp_path / "fake")}, **kw))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["loop"].update(period=-5), "period and history must be longer than 0 (got period -5 s"),
    (lambda d: d["loop"].update(period=30), "period 30 s: at least 60 s"),
    (lambda d: d["loop"].update(period="abc"), "period 'abc': must be a number"),
    (lambda d: d.update(perod=600), "unknown setting perod"),
    (lambda d: d.update(loop=[1, 2]), "\"loop\" must be an object of the loop's settings"),
    (lambda d: d.pop("connector"), "no connector"),
    (lambda d: d["connector"].update(kind="ssh"), "connector 'ssh': use slurm or fake"),
    (lambda d: d.update(bounds={"PriorityWeightAge": [5, 1]}), "bound on PriorityWeightAge [5, 1]: lo is above hi"),
    (lambda d: d.update(mode="yolo"), "mode 'yolo': use propose or auto"),
    (lambda d: d.update(notify="hooks.example.org"), "notify URL 'hooks.example.org': give an http:// or https://"),
])
def test_a_hand_edited_settings_file_is_refused_in_one_line(tmp_path, edit, message):
    """Was: `"period": -5` made `agent run` busy-loop (2,005 rounds in 20 s); `"abc"` a TypeError."""
    _agent(tmp_path)
    path = tmp_path / "state" / SETTINGS_FILE
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    for command in (("status",), ("run", "--rounds", "1"), ("step",)):
        line = one_error(cli("agent", *command, "--state", tmp_path / "state"))
        assert line.startswith(f"{path}: ") and message in line, command
    with pytest.raises(LiveError, match=f"^{path}: "):
        open_agent(tmp_path / "state")


@pytest.mark.parametrize("content, message", [
    (b"[1, 2]", "not the agent's settings (a JSON object expected, got list)"),
    (b"{\"connector\": ", "cannot read the agent's settings: Expecting value"),
    (b"\xff\xfe{}", "not UTF-8 text (byte 0); expected a JSON file of the agent's settings"),
    (b"{" + b" " * (1 << 20) + b"}", "larger than 1048576 bytes; not a JSON file of the agent's settings"),
])
def test_a_settings_file_of_the_wrong_shape_is_one_line_naming_it(tmp_path, content, message):
    (tmp_path / "state").mkdir()
    path = tmp_path / "state" / SETTINGS_FILE
    path.write_bytes(content)
    assert one_error(cli("agent", "status", "--state", tmp_path / "state")).startswith(f"{path}: {message}")


def test_a_settings_fifo_is_refused_not_waited_on(tmp_path):
    (tmp_path / "state").mkdir()
    os.mkfifo(tmp_path / "state" / SETTINGS_FILE)
    assert "is a FIFO (named pipe), not a regular file" in one_error(cli("agent", "status", "--state", tmp_path / "state"))


# ------------------------------------------------------------------ agent init checks everything first

@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "etc" / "slurm.conf"
    path.parent.mkdir()
    path.write_text(f"ClusterName=x\nInclude {tmp_path / 'etc' / 'autosched.conf'}\n")
    return path


@pytest.mark.parametrize("args, message", [
    (["--bound", "PriorityWeightage=1000:1000"], "bound on PriorityWeightage: not a managed numeric knob of multifactor"),
    (["--bound", "PriorityWeightAge=5:1"], "bound on PriorityWeightAge [5, 1]: lo is above hi"),
    (["--bound", "PriorityWeightAge=nan:nan"], "bound on PriorityWeightAge [nan, nan]: must be two finite numbers"),
    (["--bound", "PriorityWeightAge=-1e9:1e12"], "bound on PriorityWeightAge [-1e+09, 1e+12]: outside the knob's range [0, 100000]"),
    (["--bound", "bf_continue=0:1"], "bound on bf_continue: not a managed numeric knob"),
    (["--bound", "PriorityWeightAge=1"], "bound PriorityWeightAge='1': use KNOB=LO:HI"),
    (["--timeout", "nan"], "timeout nan: a Slurm command's time limit must be a number of seconds in (0, 3600]"),
    (["--timeout", "0"], "timeout 0.0: a Slurm command's time limit"),
    (["--timeout", "-5"], "timeout -5.0: a Slurm command's time limit"),
    (["--history", "3000000d"], "history of 3,000,000 days is beyond the 366-day limit of one workload sample"),
    (["--period", "400d"], "period of 400 days is beyond the 366-day limit"),
    (["--period", "10"], "period 10 s: at least 60 s"),
    (["--max-step", "0"], "max step 0: must be in (0, 1]"),
    (["--min-jobs", "0"], "min jobs 0: must be at least 1"),
    (["--rollback-margin", "-0.01"], "rollback margin -0.01: must be at least 0"),
    (["--fix", "PriorityWeightAge=5"], "cannot fix PriorityWeightAge: a knob with a live Slurm setting"),
    (["--model", "crystal"], "unknown workload model 'crystal'"),
    (["--seed-history", "/nonexistent/h.txt"], "/nonexistent/h.txt: no such file"),
    (["--objective", "p99_jct", "--metric", "avg_queue"], "--objective and --metric are one option"),
])
def test_init_refuses_a_bad_option_before_it_reads_or_writes_anything(tmp_path, conf, args, message):
    """Was: a misspelt, inverted, NaN or out-of-range bound was ignored (auto mode applied
    PriorityWeightAge=525 under `PriorityWeightage=1000:1000`); `--timeout nan` a traceback each
    round, 0 or -5 an agent blocked forever; `--history 3000000d` 24 GB of memory at `step`."""
    state = tmp_path / "state"
    assert message in one_error(cli("agent", "init", "--state", state, "--slurm-conf", conf, *args))
    assert not state.exists() and not (conf.parent / "autosched.conf").exists()


def test_init_takes_the_old_spelling_of_a_renamed_flag_and_hides_it(tmp_path, conf):
    assert cli("agent", "init", "--state", tmp_path / "s", "--slurm-conf", conf, "--metric", "p99_jct").exit_code == 0
    assert AgentSettings.load(tmp_path / "s").metric == "p99_jct"
    assert cli("agent", "init", "--state", tmp_path / "t", "--slurm-conf", conf, "--objective", "avg_queue",
               "--noise-k", "1.5", "--max-loss", "0.1", "--level-sd", "0.2", "--no-drift", "--seed", "7").exit_code == 0
    s = AgentSettings.load(tmp_path / "t")
    assert (s.metric, s.guard_k, s.guard_max_loss, s.level_sd, s.drift, s.seed) == ("avg_queue", 1.5, 0.1, 0.2, False, 7)
    for command in (("agent", "init"), ("run",)):
        shown = cli(*command, "--help").output
        assert "--objective" in shown and "--metric" not in shown


def test_init_with_good_bounds_saves_them_and_the_agent_tunes_inside(tmp_path, conf):
    r = cli("agent", "init", "--state", tmp_path / "s", "--slurm-conf", conf, "--auto",
            "--bound", "PriorityWeightAge=100:2000", "--bound", "bf_window=60:600")
    assert r.exit_code == 0, r.output
    s = AgentSettings.load(tmp_path / "s")
    assert s.bounds == {"PriorityWeightAge": [100.0, 2000.0], "bf_window": [60.0, 600.0]} and s.mode == "auto"


def test_the_agent_s_controller_is_made_of_its_settings(tmp_path):
    agent = _agent(tmp_path, period=600.0, history=3600.0, min_jobs=10, budget=4, model="replay", guard_margin=0.0,
                   guard_k=0.0)
    agent.connector.update(clock=PINNED_NOW)
    built = []
    new = agent.tuning.new_controller
    agent.tuning.new_controller = lambda running, setup: built.append(new(running, setup)) or built[-1]
    agent.step()
    ctl = built[-1]
    assert ctl.config is agent.settings and ctl.guardrail == Guardrail(0.0, 0.0) and ctl.drift_window == 600.0
    assert ctl.search.budget == 4 and ctl.drift is not None and ctl.policy == ctl.config.policy
    # the live part of the space: the knobs the agent may not write pinned, as `run --live-knobs` pins them
    assert ctl.search.subspace is not None and "placement" in ctl.search.subspace.pinned_values()
    # the memory is kept under the policy's name, as the settings give it
    assert ctl.policy_name == ctl.policy_ref == "multifactor" == ctl.memory().policy
    assert replace(agent.settings, period=1200.0).period == 1200.0  # still a checked, frozen record
