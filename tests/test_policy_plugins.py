"""Policies from outside the tree: an installed package's entry point (group autosched.policies)
or ``--policy package.module:Class``, through `get_policy` and every command that takes --policy;
one-line errors for each way a plugin can be broken; the battery on a plugin's class."""

from __future__ import annotations

import json
import random
import sys

import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.policies import POLICIES, PolicyLoadError, UnknownPolicy, available_policies, get_policy
from autosched.policies.battery import check_policy

runner = CliRunner()

POLICY_SOURCE = '''
from autosched.policies import PLACEMENT, Policy
from autosched.space import ConfigSpace, Int


class Shortest(Policy):
    """Fewest GPUs first, starting every waiting job that fits (a plugin's policy)."""

    name = "shortest"
    summary = "fewest GPUs first (a plugin)"
    space = ConfigSpace([PLACEMENT, Int("window", "jobs looked at per decision", low=1, high=1000, default=50)])

    def configure(self):
        self.window = self.config["window"]

    def bind(self, part, jobs):
        self.waiting = []
        super().bind(part, jobs)

    def on_arrival(self, j, now):
        self.waiting.append(j)

    def schedule(self, now):
        gpus = self.jobs.gpus
        self.waiting.sort(key=lambda j: (gpus[j], j))
        started = {j for j in self.waiting[:self.window] if self.part.start(j)}
        self.waiting = [j for j in self.waiting if j not in started]


class NotAPolicy:
    name = "not_a_policy"
'''

# Modules the tests write; dropped from sys.modules after each test (each writes its own copy).
MODULES = ("shortest_plugin", "broken_plugin", "misnamed_plugin")


def write_distribution(root, dist: str, entry_points: dict[str, str]) -> None:
    """An installed distribution as importlib.metadata finds it: NAME-VERSION.dist-info."""
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = [f"{name} = {target}" for name, target in entry_points.items()]
    info.joinpath("entry_points.txt").write_text("[autosched.policies]\n" + "\n".join(lines) + "\n")


@pytest.fixture()
def plugin_path(tmp_path, monkeypatch):
    """A directory on sys.path holding package `shortest_plugin` (its policy module) and its
    dist-info, which declares entry point ``shortest``."""
    pkg = tmp_path / "shortest_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "policy.py").write_text(POLICY_SOURCE)
    write_distribution(tmp_path, "shortest_plugin", {"shortest": "shortest_plugin.policy:Shortest"})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] in MODULES]:
        del sys.modules[name]


@pytest.fixture()
def tiny(tmp_path):
    # On 1 node of 4 GPUs, all at 0: a (4 GPUs, 100 s), b (1 GPU, 50 s), c (2 GPUs, 50 s).
    f = tmp_path / "tiny.csv"
    f.write_text("job_id,submit_time,num_gpus,duration\na,0,4,100\nb,0,1,50\nc,0,2,50\n")
    return f


def test_an_entry_point_is_found_by_its_name(plugin_path):
    cls = get_policy("shortest")
    assert cls.__module__ == "shortest_plugin.policy" and cls.name == "shortest"
    assert "shortest" not in POLICIES  # the registry stays the built-in policies
    assert list(available_policies()) == [*POLICIES, "shortest"]


def test_module_colon_class_needs_no_entry_point(tmp_path, monkeypatch):
    (tmp_path / "shortest_plugin").mkdir()
    (tmp_path / "shortest_plugin" / "__init__.py").write_text(POLICY_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert get_policy("shortest_plugin:Shortest").name == "shortest"
        assert list(available_policies()) == list(POLICIES)
    finally:
        sys.modules.pop("shortest_plugin", None)


def test_simulate_runs_a_plugin_by_entry_point_and_by_module(plugin_path, tiny):
    # Fewest GPUs first: b (1) and c (2) start at 0 and end at 50; a (4) then runs 50-150.
    # JCTs 150, 50, 50: average 250/3. (FIFO would run a first: 100, 150, 150.)
    for name in ("shortest", "shortest_plugin.policy:Shortest"):
        r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x4", "--policy", name, "--set", "window=5", "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out["policy"] == "shortest" and out["config"] == {"placement": "consolidate", "window": 5}
        assert out["avg_jct"] == pytest.approx(250 / 3) and out["makespan"] == 150


def test_policies_lists_entry_points_and_shows_a_module_class(plugin_path):
    r = runner.invoke(app, ["policies", "--json"])
    assert r.exit_code == 0, r.output
    listed = json.loads(r.stdout)
    assert list(listed) == [*POLICIES, "shortest"]
    assert listed["shortest"]["summary"] == "fewest GPUs first (a plugin)"
    assert listed["shortest"]["knobs"]["window"]["default"] == 50
    r = runner.invoke(app, ["policies", "shortest_plugin.policy:Shortest"])
    assert r.exit_code == 0, r.output
    assert "shortest" in r.output and "window" in r.output and "Fewest GPUs first" in r.output


def test_tune_takes_a_plugin_and_its_best_config_runs_in_simulate(plugin_path, tiny, tmp_path):
    best = tmp_path / "best.json"
    spec = "shortest_plugin.policy:Shortest"
    r = runner.invoke(app, ["tune", str(tiny), "-c", "1x4", "--policy", spec, "--budget", "3", "--no-screening",
                            "--out", str(best), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(best.read_text())["policy"] == "shortest"  # the policy's own name
    # The file names the plugin by its name: with --policy MODULE:CLASS, or as the entry point.
    for args in (["--policy", spec], []):
        r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x4", "--config", str(best), *args, "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["policy"] == "shortest"


@pytest.fixture()
def three_days(tmp_path):
    """400 jobs over about 3 days (random sizes and durations, seeded)."""
    rng = random.Random(1)
    rows, t = ["job_id,submit_time,num_gpus,duration"], 0.0
    for i in range(400):
        t += rng.expovariate(1 / 700)
        rows.append(f"j{i},{t:.0f},{rng.choice([1, 1, 2, 4, 8])},{rng.randint(60, 20000)}")
    f = tmp_path / "three_days.csv"
    f.write_text("\n".join(rows) + "\n")
    return f


def test_run_and_workload_evaluate_take_a_module_class(plugin_path, three_days, tmp_path):
    # The loop tunes the plugin's knobs each day and judges the winner by the policy's own name.
    spec = "shortest_plugin.policy:Shortest"
    r = runner.invoke(app, ["run", str(three_days), "-c", "2x8", "--policy", spec, "--period", "1d", "--history", "1d",
                            "--budget", "2", "--samples", "2", "--validation-samples", "2", "--workers", "1",
                            "--strategies", "default,autosched", "--cache", str(tmp_path / "cache"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["settings"]["policy"] == spec and set(out["strategies"]) == {"default", "autosched"}
    r = runner.invoke(app, ["workload", "evaluate", str(three_days), "-c", "2x8", "--policy", spec, "--history", "1d",
                            "--horizon", "1d", "--step", "1d", "--panel", "2", "--models", "replay", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["replay"]["regret_mean"] == 0.0  # replaying the future ranks configs exactly


@pytest.mark.parametrize("name, message", [
    ("no_such_module:Shortest", "policy 'no_such_module:Shortest': no module named 'no_such_module' "
                                "(install it, or put its directory on PYTHONPATH)"),
    ("shortest_plugin.nope:Shortest", "no module named 'shortest_plugin.nope'"),
    ("shortest_plugin.policy:Longest", "policy 'shortest_plugin.policy:Longest': module shortest_plugin.policy "
                                       "has no 'Longest'"),
    ("shortest_plugin.policy:NotAPolicy", "is not a subclass of autosched.policies.Policy"),
    ("shortest_plugin.policy:Int", "is not a subclass of autosched.policies.Policy"),
    ("shortest_plugin.policy:", "expected MODULE:CLASS"),
    ("nosuch", "unknown policy 'nosuch'; known: fifo, sjf, srtf, tiresias, qssf, multifactor, shortest, "
               "or MODULE:CLASS"),
])
def test_a_broken_policy_name_is_one_line_on_every_command(plugin_path, tiny, name, message):
    for args in (["simulate", str(tiny), "-c", "1x4", "--policy", name],
                 ["policies", name],
                 ["tune", str(tiny), "-c", "1x4", "--policy", name, "--budget", "2"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert message in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_a_module_that_fails_to_import_is_named(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin.py").write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PolicyLoadError, match="importing broken_plugin fails: No module named "
                                              "'a_dependency_that_is_not_installed'"):
        get_policy("broken_plugin:Policy")


def test_an_entry_point_that_fails_to_import_is_one_line(tmp_path, monkeypatch, tiny):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('plugin bug')\n")
    write_distribution(tmp_path, "broken_plugin", {"broken": "broken_plugin:Broken"})
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(PolicyLoadError, match="entry point 'broken' = 'broken_plugin:Broken' "
                                                  r"\(group 'autosched.policies'\) fails to import: RuntimeError: plugin bug"):
            get_policy("broken")
        assert get_policy("fifo") is POLICIES["fifo"]  # a built-in name never loads plugins
        for args in (["policies"], ["simulate", str(tiny), "-c", "1x4", "--policy", "broken"]):
            r = runner.invoke(app, args)
            assert r.exit_code == 2 and "fails to import: RuntimeError: plugin bug" in r.output, r.output
            assert len(r.output.strip().splitlines()) == 1
    finally:
        sys.modules.pop("broken_plugin", None)


def test_an_entry_point_must_carry_its_policys_name(plugin_path):
    write_distribution(plugin_path, "misnamed_plugin", {"short": "shortest_plugin.policy:Shortest"})
    with pytest.raises(PolicyLoadError, match="its class is named 'shortest'; the entry point must carry"):
        get_policy("short")


def test_an_entry_point_cannot_take_a_builtin_name(plugin_path):
    write_distribution(plugin_path, "misnamed_plugin", {"fifo": "shortest_plugin.policy:Shortest"})
    with pytest.raises(PolicyLoadError, match="entry point 'fifo' .* has the name of a built-in policy"):
        available_policies()
    assert get_policy("fifo") is POLICIES["fifo"]


def test_unknown_and_load_errors_are_input_errors():
    from autosched.errors import InputError

    assert issubclass(UnknownPolicy, InputError) and issubclass(PolicyLoadError, InputError)


def test_the_battery_runs_on_a_plugins_policy(plugin_path):
    # What a plugin's own test suite does: every check, as many cases as a built-in policy gets.
    check_policy(get_policy("shortest"), greedy={"window": 1000})


BAD_SOURCE = '''
import math
from autosched.policies import PLACEMENT, Policy
from autosched.space import ConfigSpace, Float

from shortest_plugin.policy import Shortest


class BadAttrs(Policy):
    name = 5
    summary = "bad"
    space = "not a space"


class BadSummary(Shortest):
    summary = ["a", "list"]


class NoPlacement(Shortest):
    space = ConfigSpace([])


class InfRange(Shortest):
    space = ConfigSpace([PLACEMENT, Float("x", "a knob", low=0.0, high=math.inf, default=1.0)])


class BuiltinName(Shortest):
    name = "fifo"


class Raiser(Shortest):
    def schedule(self, now):
        raise ValueError("plugin bug in schedule")
'''


@pytest.fixture()
def bad_plugins(plugin_path):
    (plugin_path / "bad_plugin.py").write_text(BAD_SOURCE)
    yield plugin_path
    sys.modules.pop("bad_plugin", None)


@pytest.mark.parametrize("cls, message", [
    ("BadAttrs", "BadAttrs.name is 5: a policy's name is a word"),
    ("BadSummary", "BadSummary.summary is ['a', 'list']: one line of text"),
    ("NoPlacement", "NoPlacement.space has no placement knob"),
    ("InfRange", "knob 'x' has range [0.0, inf] and default 1.0; both bounds and the default must "
                 "be finite"),
    ("BuiltinName", "its name 'fifo' is a built-in policy's"),
])
def test_a_plugin_class_of_the_wrong_shape_is_one_line(bad_plugins, tiny, cls, message):
    """Each used to end in a traceback (AttributeError, KeyError 'placement', OverflowError in the
    search), or, with a built-in's name, in a config file that named the built-in policy."""
    spec = f"bad_plugin:{cls}"
    for args in (["policies", spec], ["simulate", str(tiny), "-c", "1x4", "--policy", spec],
                 ["tune", str(tiny), "-c", "1x4", "--policy", spec, "--budget", "3",
                  "--no-screening"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert message in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_plugins_own_exception_is_one_line_naming_it(bad_plugins, tiny):
    r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x4", "--policy", "bad_plugin:Raiser"])
    assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit)
    assert r.output.strip() == ("error: policy 'bad_plugin:Raiser' raised ValueError: plugin bug in "
                                "schedule (check it with autosched.policies.battery.check_policy, "
                                "docs/extending.md)")


@pytest.mark.parametrize("how", ["spec", "entry point"])
def test_a_plugin_that_exits_at_import_is_one_line(tmp_path, monkeypatch, tiny, how):
    """SystemExit(0) at import ended autosched with exit 0 and no output."""
    (tmp_path / "exiter.py").write_text("raise SystemExit(0)\n")
    write_distribution(tmp_path, "exiter", {"exits": "exiter:X"})
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        name = "exiter:X" if how == "spec" else "exits"
        r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x4", "--policy", name])
        assert r.exit_code == 2 and "fail" in r.output and r.output.endswith(" SystemExit: 0\n")
        assert len(r.output.strip().splitlines()) == 1
    finally:
        sys.modules.pop("exiter", None)


def test_two_packages_declaring_one_entry_point_are_named(plugin_path, tmp_path):
    (plugin_path / "other_shortest.py").write_text(POLICY_SOURCE)
    write_distribution(plugin_path, "other_dist", {"shortest": "other_shortest:Shortest"})
    try:
        for call in (lambda: get_policy("shortest"), available_policies):
            with pytest.raises(PolicyLoadError, match=(
                    r"entry point 'shortest' \(group 'autosched.policies'\) is declared by 2 installed "
                    r"packages: 'other_shortest:Shortest' in distribution 'other_dist'; "
                    r"'shortest_plugin.policy:Shortest' in distribution 'shortest_plugin'|"
                    r"'shortest_plugin.policy:Shortest' in distribution 'shortest_plugin'; "
                    r"'other_shortest:Shortest' in distribution 'other_dist'")):
                call()
    finally:
        sys.modules.pop("other_shortest", None)


def test_a_study_is_not_resumed_by_another_class_of_the_same_name(plugin_path, tiny, tmp_path):
    (plugin_path / "other_shortest.py").write_text(POLICY_SOURCE)
    study = tmp_path / "study.db"
    try:
        r = runner.invoke(app, ["tune", str(tiny), "-c", "1x4", "--policy",
                                "shortest_plugin.policy:Shortest", "--budget", "2", "--no-screening",
                                "--study", str(study)])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["tune", str(tiny), "-c", "1x4", "--policy",
                                "other_shortest:Shortest", "--budget", "3", "--no-screening",
                                "--study", str(study)])
        assert r.exit_code == 2, r.output
        assert ("policy classes: [\"shortest=shortest_plugin.policy:Shortest\"] in the study, "
                "[\"shortest=other_shortest:Shortest\"] now") in r.output
    finally:
        sys.modules.pop("other_shortest", None)


def test_a_config_file_cannot_import_a_module(tmp_path, monkeypatch, tiny):
    """A config file names a policy by its name; `"policy": "evilmod:X"` imported evilmod."""
    (tmp_path / "evilmod.py").write_text(
        f"import pathlib; pathlib.Path({str(tmp_path / 'PWNED')!r}).write_text('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    evil = tmp_path / "evil.json"
    evil.write_text('{"policy": "evilmod:X", "knobs": {}}')
    try:
        for args in ([], ["--policy", "fifo"]):
            r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x4", "--config", str(evil), *args])
            assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
            assert not (tmp_path / "PWNED").exists()
        assert "a config file names a policy by its name only: to load that module, give --policy " \
               "evilmod:X" in " ".join(runner.invoke(app, ["simulate", str(tiny), "-c", "1x4",
                                                            "--config", str(evil)]).output.split())
    finally:
        sys.modules.pop("evilmod", None)


def test_a_config_file_and_policy_that_agree_on_a_spec_load_it(plugin_path, tiny, tmp_path):
    conf = tmp_path / "c.json"
    conf.write_text('{"policy": "shortest_plugin.policy:Shortest", "knobs": {"window": 5}}')
    r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x4", "--config", str(conf), "--policy",
                            "shortest_plugin.policy:Shortest", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["window"] == 5


def test_the_unknown_policy_list_names_each_policy_once(plugin_path):
    """An entry point named like a built-in policy made the list say `fifo` twice."""
    write_distribution(plugin_path, "misnamed_plugin", {"fifo": "shortest_plugin.policy:Shortest"})
    with pytest.raises(UnknownPolicy) as e:
        get_policy("nosuch")
    assert str(e.value).count("fifo") == 1
