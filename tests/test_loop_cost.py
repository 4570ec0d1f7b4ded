"""benchmarks/loop_cost.py: the rounds' time by kind, worked out by hand on a tiny result."""

from conftest import script_module

lc = script_module("benchmarks/loop_cost.py")


def _round(trigger: str, seconds: float, search: float | None) -> dict:
    return {"trigger": trigger, "tuning_seconds": seconds,
            "tuning_cost": None if search is None else {"seconds": search}}


def test_a_round_kind_is_read_from_its_trigger():
    assert [lc.kind_of(t) for t in ("first round", "early round", "period", "contention: queue 55 jobs",
                                    "drift: arrival rate")] == [
        "period 0", "period 0", "boundary", "contention", "drift"]


def test_shares_and_cpu_worked_out_by_hand():
    # seed 0: a first round of 4 s (3 s searching), a contention round of 10 s (6 s searching);
    # seed 1: a boundary round of 6 s that could not tune (no search), CPU 40 and 60 s a seed.
    # Rounds' time 20 s: period 0 searches 3/20 = 15%, rest 1/20 = 5%; contention 30% and 20%;
    # boundary 0% and 30%. CPU 50 s a seed: 10, 25 and 15 s of it.
    runs = [{"settings": {"seed": 0}, "strategies": {"autosched": {"cpu_seconds": 40.0, "decisions": [
                _round("first round", 4.0, 3.0), _round("contention: queue 55 jobs", 10.0, 6.0)]}}},
            {"settings": {"seed": 1}, "strategies": {"autosched": {"cpu_seconds": 60.0, "decisions": [
                _round("period", 6.0, None)]}}}]
    c = lc.cost_of(runs)
    assert (c.seeds, c.rounds, c.total) == (2, {"period 0": 1, "contention": 1, "boundary": 1}, 20.0)
    assert lc.table([("tiny", c)])[2:] == [
        "| tiny | 2 | 50 | boundary | 0.5 | 0% | 30% | 15 |",
        "| tiny | 2 | 50 | period 0 | 0.5 | 15% | 5% | 10 |",
        "| tiny | 2 | 50 | contention | 0.5 | 30% | 20% | 25 |"]


def test_a_merged_result_gives_each_of_its_seeds():
    merged = {"settings": {"seed": 0}, "runs": [{"settings": {"seed": 1}}, {"settings": {"seed": 2}}]}
    assert [r["settings"]["seed"] for r in lc.seeds_of(merged)] == [0, 1, 2]


def test_a_file_that_is_not_a_run_is_named_and_refused(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert lc.main([str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    bad.write_text('{"strategies": {"autosched": {}}}')  # JSON, but no decisions
    assert lc.main([str(bad)]) == 2
