"""`autosched run` end to end (real tuner and workload model, tiny settings) and its bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.trace import write_trace
from test_adapt_doubles import synthetic_trace

runner = CliRunner()
STRATS = ("default", "autosched", "last_period", "oracle_static", "oracle_period")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "tiny.csv"
    write_trace(synthetic_trace(days=6, per_day=60, seed=4), path)
    return path


def _args(tiny, *extra):
    return ["run", str(tiny), "--cluster", "1x8", "--period", "2d", "--history", "2d", "--budget", "2",
            "--samples", "2", "--no-screening", *extra]


def test_run_json_and_report(tiny, tmp_path):
    res = runner.invoke(app, _args(tiny, "--json", "--report", str(tmp_path / "rep")))
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out["strategies"]) == set(STRATS)
    n_periods = len(out["boundaries"]) - 1
    assert n_periods == 3
    # the synthetic trace has no CPU counts: every job is sized by the node shape of 1x8
    assert out["cpus"] == {"jobs_with_cpus": 0, "jobs_given_cpus": out["jobs"], "cpus_per_gpu": 1.0,
                           "cpus_per_node": 8, "rule": "1 CPU(s) per GPU (the node shape: 8 CPUs, 8 GPUs)"}
    for name in STRATS:
        s = out["strategies"][name]
        assert {"avg_jct", "p99_jct", "avg_queue", "periods"} <= set(s)
        assert len(s["periods"]) == n_periods and s["oracle"] == name.startswith("oracle")
        assert sum(p["jobs"] for p in s["periods"]) == out["jobs"]
    # rounds: 3/7 into period 0 (the default first decision), then at each inner boundary (a day
    # later is within half a day of the boundary: no early round)
    first = out["boundaries"][0] + round(3 / 7 * 2 * 86400)
    assert [d["time"] for d in out["strategies"]["oracle_period"]["decisions"]] == [first, *out["boundaries"][1:-1]]
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "ORACLE" in page and "<img" in page and "causal graph" in page
    assert "the same, jobs after period 0" in page and "8 fresh samples" in page
    after = out["summary"]["share_of_oracle_static_gain_after_p0"]
    assert after["default"] in (0.0, None) and after["oracle_static"] in (1.0, None)
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["jobs"] == out["jobs"]


@pytest.mark.parametrize(("option", "rounds_after_start"),
                         [("off", [2, 4]), ("OFF", [2, 4]), ("1d", [1, 2, 4]), ("12h", [0.5, 1.5, 2, 4])])
def test_run_first_decision(tiny, option, rounds_after_start):
    res = runner.invoke(app, _args(tiny, "--json", "--strategies", "default,last_period", "--first-decision", option))
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    decisions = out["strategies"]["last_period"]["decisions"]
    assert [d["time"] - out["boundaries"][0] for d in decisions] == [x * 86400 for x in rounds_after_start]
    firsts = ["first round", "early round"][:len(decisions) - 2]  # an early round a day later, if before 2d
    assert [d["trigger"] for d in decisions] == firsts + ["period"] * 2


@pytest.mark.parametrize("option", ["2d", "3d", "0", "soon"])
def test_run_first_decision_outside_the_first_period_is_refused(tiny, option):
    res = runner.invoke(app, _args(tiny, "--first-decision", option))
    assert res.exit_code == 2 and "--first-decision" in res.output and "Traceback" not in res.output


def test_run_first_decision_with_a_bad_period_names_the_period(tiny):
    res = runner.invoke(app, ["run", str(tiny), "--cluster", "1x8", "--period", "0", "--first-decision", "1d"])
    assert res.exit_code == 2 and "period" in res.output and "--first-decision" not in res.output


def test_run_backlog_history_reaches_the_round_workloads(tiny, monkeypatch):
    """--backlog-history (the default): the evaluation workloads' carried-over jobs keep their past."""
    import autosched.adapt.controller as controller

    seen = []
    real = controller.concat

    def spy(backlog, *rest, **k):
        seen.append(backlog)
        return real(backlog, *rest, **k)

    monkeypatch.setattr(controller, "concat", spy)
    for flags, want in ((["--backlog-history"], True), (["--no-backlog-history"], False), ([], True)):
        seen.clear()
        res = runner.invoke(app, _args(tiny, "--json", "--strategies", "default,last_period", "--first-decision", "off",
                                       *flags))
        assert res.exit_code == 0, res.output
        backlogs = [t for t in seen if len(t) and t.attained is not None]
        assert bool(backlogs) is want and all((t.attained >= 0).all() for t in backlogs)


def test_run_early_rounds_follow_the_first_round_daily(tiny):
    """--early-rounds (the default): after the first round, a round a day until the first boundary,
    recorded with its own trigger, for every tuned strategy. Periods of 2 days, the first round at
    12 h, an early round a day later (half a day before the boundary)."""
    first, early = ("first round", 43_200), ("early round", 129_600)
    periods = [("period", 172_800), ("period", 345_600)]
    for flags, want in (([], [first, early, *periods]), (["--no-early-rounds"], [first, *periods]),
                        (["--first-decision", "off"], periods)):
        flags = flags if "off" in flags else ["--first-decision", "12h", *flags]
        res = runner.invoke(app, _args(tiny, "--json", "--strategies", "default,autosched,last_period", *flags))
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        for name in ("autosched", "last_period"):
            got = [(d["trigger"], round(d["time"] - out["boundaries"][0])) for d in out["strategies"][name]["decisions"]]
            assert got == want, (flags, name)
    res = runner.invoke(app, _args(tiny, "--first-decision", "off", "--early-rounds"))
    assert res.exit_code == 2 and "--first-decision off" in res.output and "Traceback" not in res.output


def test_run_table_output(tiny):
    res = runner.invoke(app, _args(tiny, "--strategies", "default,autosched", "--no-drift"))
    assert res.exit_code == 0, res.output
    assert "autosched" in res.stdout and "avg JCT" in res.stdout and "(period):" in res.stdout
    # written to a pipe, the table is not cut to 80 columns (no value ends in an ellipsis)
    assert "…" not in res.stdout and "vs default" in res.stdout


def test_run_table_in_a_pipe_keeps_every_column_of_all_strategies(tiny):
    res = runner.invoke(app, _args(tiny))
    assert res.exit_code == 0, res.output
    table = res.stdout.split("tuning:")[0]
    assert "…" not in table and "oracle_period (oracle)" in table and "per period vs default" in table


@pytest.mark.parametrize("extra, message", [
    (["--period", "0"], "period and history must be longer than 0 (got period 0 s"),
    (["--samples", "0"], "samples 0: must be at least 1"),
    (["--validation-samples", "1"], "validation samples must be at least 2, to measure a spread (got 1)"),
    (["--guard-k", "-1"], "guard k -1.0: must be at least 0"),
    (["--noise-k", "-1"], "guard k -1.0: must be at least 0"),  # the old spelling
    (["--guard-max-loss", "-0.1"], "guard max loss -0.1: must be at least 0"),
    (["--level-sd", "3"], "level sd must be in [0, 2] (got 3)"),
    (["--max-loss", "nan"], "guard max loss nan: must be finite"),
    (["--validation-samples", "600"], "at most 503 samples and 506 validation samples a round"),
    (["--period", "soon"], "--period 'soon' is not a length of time"),
    (["--strategies", "default,magic"], "--strategies: unknown magic"),
    (["--model", "crystal"], "unknown workload model 'crystal'"),
    (["--policy", "lottery"], "unknown policy 'lottery'"),
    (["--budget", "0"], "budget 0: must be at least 1"),
    (["--objective", "speed"], "objective: unknown metric 'speed'"),
    (["--history", "400d"], "history of 400 days is beyond the 366-day limit of one workload sample"),
    (["--seed", "-1"], "--seed must be in [0, 4294967295] (got -1)"),
    (["--span", "1d"], "less than two periods"),
    (["--span", "0"], "--span 0: must be > 0"),
    (["--span", "-1d"], "--span -1d: must be > 0"),
    (["--skip", "-1d"], "--skip -1d: must be >= 0"),
])
def test_run_bad_input_is_one_line(tiny, extra, message):
    res = runner.invoke(app, _args(tiny, *extra))
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_run_needs_cluster_with_a_trace(tiny):
    res = runner.invoke(app, ["run", str(tiny)])
    assert res.exit_code == 2 and "--cluster is required" in res.output


def _hide(monkeypatch, module):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))


def test_run_screening_is_opt_in_and_imports_causal_learn_only_when_screening():
    """Screening is off by default in the loop (it did not earn its cost, docs/tuning.md); with
    --screening every install screens (causal-learn is a core dependency). It is slow to import,
    so nothing imports it before a round screens."""
    import subprocess
    import sys

    code = ("import sys, autosched.cli, autosched.tune, autosched.adapt; "
            "from autosched.cli.run_cmd import RunOptions; from autosched.adapt import STRATEGIES; "
            "s = RunOptions(loop=dict(period=604800.0, budget=8, guard_k=2.0, backlog_history=False, screening=True), workers=1, "
            "strategies='default,autosched', first_decision=None, early_rounds=None, skip='0', span=None, "
            "oracle_budget=None).resolve(STRATEGIES)[0]; "
            "assert s.search.screening is True; assert 'causallearn' not in sys.modules, 'imported early'; "
            "from autosched.adapt import Settings; assert Settings().search.screening is False")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_run_report_without_matplotlib_fails_cleanly(tiny, monkeypatch, tmp_path):
    _hide(monkeypatch, "matplotlib")
    res = runner.invoke(app, _args(tiny, "--report", str(tmp_path / "r")))
    assert res.exit_code == 2 and "--report needs matplotlib" in res.output
    assert not (tmp_path / "r").exists()


def test_run_seeds_prints_mean_and_spread(tiny, tmp_path):
    args = _args(tiny, "--strategies", "default,autosched,last_period", "--seeds", "2", "--budget", "1",
                 "--cache", str(tmp_path / "cache"))
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["across_seeds"]["seeds"] == [0, 1] and len(out["runs"]) == 1 and out["runs"][0]["settings"]["seed"] == 1
    assert out["across_seeds"]["relative_avg_jct"]["default"] == {"mean": 1.0, "sd": 0.0, "n": 2}
    assert "larger_than_spread" in out["across_seeds"]["autosched_lead_over_last_period"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "over 2 seeds" in res.stdout and "than the spread" in res.stdout


# The packages of pyproject.toml's extras that a plain install lacks (matplotlib is not one:
# causal-learn, a core dependency, requires it).
OPTIONAL = ("torch", "ray", "fastapi", "uvicorn", "selenium")


def _decisions(tiny, tmp_path, prelude: str) -> dict:
    """`autosched run` (screening on, as by default) in a fresh interpreter after `prelude`; what it
    decided: each strategy's configs over time, rounds' candidates and verdicts, and its result."""
    import subprocess
    import sys

    args = ["run", str(tiny), "--cluster", "1x8", "--period", "2d", "--history", "2d", "--budget", "12",
            "--samples", "2", "--workers", "1", "--strategies", "default,autosched,last_period", "--screening",
            "--json"]
    code = f"{prelude}\nimport sys\nfrom autosched.cli import main\nsys.argv = ['autosched', *{args!r}]\nmain()"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    keep = ("deployed", "config", "candidate", "predicted_gain", "reason", "causal_graph", "screened_knobs")
    return {name: {"avg_jct": s["avg_jct"], "timeline": s["timeline"],
                   "decisions": [{k: d[k] for k in keep} for d in s["decisions"]]}
            for name, s in out["strategies"].items()}


def test_the_main_job_decides_the_same_without_any_optional_package(tiny, tmp_path):
    """The README's command must make the same decisions on a plain install as with every extra:
    run once with each optional package made unimportable (as on `pip install -e .`), once with
    the installed ones imported first, and compare every decision. With --screening, so that
    causal-learn and its dependencies run too (the default, without, imports less)."""
    import importlib.util

    # A finder that says "not installed" for them (a None in sys.modules would not do: SciPy reads
    # sys.modules["torch"] to tell torch tensors apart, and expects a module or nothing there).
    block = ("import sys\nclass Absent:\n    def find_spec(self, name, path=None, target=None):\n"
             f"        if name.split('.')[0] in {OPTIONAL!r}:\n"
             "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
             "sys.meta_path.insert(0, Absent())")
    present = [m for m in OPTIONAL if importlib.util.find_spec(m) is not None]
    load = "\n".join(f"import {m}" for m in present) or "pass"
    plain = _decisions(tiny, tmp_path / "plain", block)
    full = _decisions(tiny, tmp_path / "full", load)
    assert any(d["causal_graph"] for s in plain.values() for d in s["decisions"]), "screening never ran"
    assert plain == full


def test_run_options_default_to_the_settings_defaults():
    """One source of truth: `autosched run` with no options decides as `Settings()` does."""
    import inspect

    from autosched.adapt import STRATEGIES, Settings
    from autosched.cli.common import loop_flags
    from autosched.cli.run_cmd import RunOptions, run_cmd
    from autosched.timeparse import parse_duration
    from autosched.tune import ExecutionConfig

    d = {k: p.default.default for k, p in inspect.signature(run_cmd).parameters.items()
         if hasattr(p.default, "default")}
    loop = {f.field: parse_duration(d[f.field]) if f.duration else d[f.field] for f in loop_flags()}
    got, _, _ = RunOptions.of({**d, "loop": loop}).resolve(STRATEGIES)
    ref = Settings()
    assert got.execution == ExecutionConfig(workers=2)  # the command's own default
    assert replace(got, execution=ref.execution) == ref
    on = "[default: on]" in inspect.signature(run_cmd).parameters["early_rounds"].default.help
    assert on is ref.early_rounds  # the help states the default it leaves to Settings
    from fractions import Fraction  # the help states the default fraction
    assert str(Fraction(ref.first_decision).limit_denominator(100)) in inspect.signature(run_cmd).parameters[
        "first_decision"].default.help


_TIMINGS = {"seconds", "cpu_seconds", "tuning_seconds", "trial_seconds", "wall_seconds"}


def _timeless(obj):
    """A result without its wall-clock timings (the only part two runs of one seed may differ in)."""
    if isinstance(obj, dict):
        return {k: _timeless(v) for k, v in obj.items() if k not in _TIMINGS}
    if isinstance(obj, list):
        return [_timeless(v) for v in obj]
    return obj


def test_seeds_run_apart_merge_into_the_seeds_run(tiny, tmp_path):
    from autosched.adapt.experiment import merge_seed_runs

    args = _args(tiny, "--strategies", "default,autosched,last_period", "--budget", "1",
                 "--cache", str(tmp_path / "cache"), "--json")
    together = json.loads(runner.invoke(app, [*args, "--seeds", "3"]).stdout)
    apart = {k: json.loads(runner.invoke(app, [*args, "--seed", str(k)]).stdout) for k in range(3)}
    merged = merge_seed_runs([("s2", apart[2]), ("s0", apart[0]), ("s1", apart[1])])
    assert list(merged) == list(together)
    assert _timeless(merged) == _timeless(together)
    # a file of several seeds merges with one of another
    two = json.loads(runner.invoke(app, [*args, "--seeds", "2"]).stdout)
    assert _timeless(merge_seed_runs([("two", two), ("s2", apart[2])])) == _timeless(together)
    assert _timeless(merge_seed_runs([("s1", apart[1])])) == _timeless(apart[1])


def test_merging_seeds_refuses_a_repeated_seed_or_another_experiment(tiny, tmp_path):
    from autosched.adapt.errors import AdaptError
    from autosched.adapt.experiment import merge_seed_runs

    args = _args(tiny, "--strategies", "default,last_period", "--budget", "1", "--cache", str(tmp_path), "--json")
    s0, s1 = (json.loads(runner.invoke(app, [*args, "--seed", str(k)]).stdout) for k in (0, 1))
    with pytest.raises(AdaptError, match=r"^b: seed 0 is in a too"):
        merge_seed_runs([("a", s0), ("b", s0)])
    other = json.loads(runner.invoke(app, [*args, "--seed", "1", "--budget", "2"]).stdout)
    with pytest.raises(AdaptError, match=r"^b: seed 1 is not a run of the same experiment as seed 0 in a: "
                                         r"they differ in settings.budget"):
        merge_seed_runs([("a", s0), ("b", other)])
    moved = {**s1, "boundaries": [b + 1 for b in s1["boundaries"]]}
    with pytest.raises(AdaptError, match="they differ in boundaries$"):
        merge_seed_runs([("a", s0), ("b", moved)])
    # the same path holding another trace: its per-day arrivals differ
    other_trace = {**s1, "workload": {**s1["workload"], "arrivals": [a + 1 for a in s1["workload"]["arrivals"]]}}
    with pytest.raises(AdaptError, match="they differ in workload$"):
        merge_seed_runs([("a", s0), ("b", other_trace)])
    s2 = {**s1, "settings": {**s1["settings"], "seed": 2, "search": {**s1["settings"]["search"], "seed": 2}}}
    with pytest.raises(AdaptError, match=r"^b: seed 2 follows seed 0 of a: the seeds must be consecutive"):
        merge_seed_runs([("a", s0), ("b", s2)])
    # a part that is not a result: named, never a KeyError or TypeError from deep inside
    with pytest.raises(AdaptError, match=r"^b: runs\[0\]: not an experiment's result \(no trace, cluster, "):
        merge_seed_runs([("a", s0), ("b", {**s1, "runs": [{}]})])
    with pytest.raises(AdaptError, match=r"^b: runs\[0\]: not an experiment's result \(no workload\)$"):
        merge_seed_runs([("a", s0), ("b", {**s1, "runs": [{k: v for k, v in s1.items() if k != "workload"}]})])
    with pytest.raises(AdaptError, match=r"^b: settings.seed is '1', not an integer$"):
        merge_seed_runs([("a", s0), ("b", {**s1, "settings": {**s1["settings"], "seed": "1"}})])
    with pytest.raises(AdaptError, match=r"^b: not an experiment's result \(its `runs` is not a list\)$"):
        merge_seed_runs([("a", s0), ("b", {**s1, "runs": 3})])


def test_merge_seeds_script_names_a_file_that_is_not_a_result(tmp_path, capsys):
    from conftest import script_module

    merge = script_module("benchmarks/merge_seeds.py")
    bad, broken = tmp_path / "bad.json", tmp_path / "broken.json"
    bad.write_text('{"settings": {}}')
    broken.write_text("{")
    assert merge.main([str(bad)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.startswith(f"error: {bad}: not an `autosched run --json` result (no trace,")
    assert merge.main([str(broken)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {broken}: cannot read a JSON result")
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({**{k: [] for k in merge.NEEDED}, "settings": {"seed": 0}, "runs": [{}]}))
    assert merge.main([str(runs)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {runs}: runs[0]: not an experiment's result")
