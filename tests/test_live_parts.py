"""Parts of the live layer worked out by hand: unit conversion both ways (export/slurm.py), the
knob mapping, scontrol/squeue/sacct parsing, the history cache, period metrics, and the command
runner with real processes (timeouts, retries, a controller that does not answer)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.export.live import live_subspace
from autosched.export.slurm import from_slurm, quantize, to_slurm
from autosched.live.errors import LiveError, SlurmUnavailable
from autosched.live.history import merge_sacct, read_jobs
from autosched.live.knobs import is_allowed, live_space, same_value
from autosched.live.slurm import (
    SlurmRunner,
    add_queue_rows,
    live_settings,
    node_gpus,
    parse_nodes,
    parse_show_config,
    setup_from_slurm,
)
from autosched.policies.multifactor import Multifactor
from autosched.space import ConfigError
from autosched.trace.slurm import slurm_seconds
from live_helpers import HEADER, row

SPACE = Multifactor.space


def test_slurm_seconds_reads_every_spelling():
    assert slurm_seconds("7-00:00:00") == 604800
    assert slurm_seconds("7-0") == 604800
    assert slurm_seconds("1-04:48:00") == 86400 + 4 * 3600 + 48 * 60
    assert slurm_seconds("00:10:00") == 600
    assert slurm_seconds("5:00") == 300  # squeue's MM:SS
    assert slurm_seconds("5") == 300  # slurm.conf's bare minutes
    assert slurm_seconds("2-3") == 2 * 86400 + 3 * 3600
    assert slurm_seconds("UNLIMITED") is None and slurm_seconds("x-1") is None


def test_knob_values_both_ways():
    assert to_slurm(SPACE["PriorityMaxAge"], 3600.0) == "0-01:00:00"
    assert from_slurm(SPACE["PriorityMaxAge"], "01:00:00") == 3600.0
    assert to_slurm(SPACE["PriorityCalcPeriod"], 5) == "5"
    assert from_slurm(SPACE["PriorityCalcPeriod"], "00:05:00") == 5
    assert to_slurm(SPACE["PriorityFavorSmall"], True) == "YES"
    assert from_slurm(SPACE["PriorityFavorSmall"], "No") is False
    assert from_slurm(SPACE["PriorityWeightAge"], "4321") == 4321
    with pytest.raises(ConfigError, match="not a Slurm time"):
        from_slurm(SPACE["PriorityMaxAge"], "soon")


@settings(max_examples=200, deadline=None)
@given(st.floats(600.0, 60 * 86400.0))
def test_quantized_times_round_trip_and_stay_within_half_a_minute(x):
    q = quantize(SPACE["PriorityMaxAge"], x)
    assert abs(q - x) <= 30.0 and q % 60 == 0
    assert from_slurm(SPACE["PriorityMaxAge"], to_slurm(SPACE["PriorityMaxAge"], q)) == q


def test_allowlist_and_fixed_knobs():
    assert is_allowed("PriorityWeightAge") and is_allowed("priorityweightfairshare")
    assert is_allowed("bf_window") and is_allowed("PriorityWeightTRES")
    for never in ("SchedulerType", "SelectType", "PriorityUsageResetPeriod", "PartitionName"):
        assert not is_allowed(never)
    ls = live_space("multifactor")
    assert ls.names == ("PriorityWeightAge", "PriorityMaxAge", "PriorityWeightFairshare",
                        "PriorityDecayHalfLife", "PriorityWeightJobSize", "PriorityFavorSmall",
                        "PriorityWeightTRES.GRES/gpu", "PriorityWeightTRES.CPU", "PriorityCalcPeriod",
                        "bf_interval", "bf_window", "bf_max_job_test", "bf_resolution", "bf_continue")
    # PriorityFlags and the partition's TRESBillingWeights need more than a reconfigure, and
    # sched_interval/default_queue_depth/batch_sched_delay are not bf_ entries: fixed in live mode
    assert ls.fixed == {"placement": "consolidate", "PriorityFlags": "FAIR_TREE",
                        "TRESBillingWeights.GRES/gpu": 1.0, "TRESBillingWeights.CPU": 0.0,
                        "backfill": True, "reserve_after": 21600.0, "sched_interval": 60,
                        "default_queue_depth": 100, "batch_sched_delay": 3}
    assert live_space("multifactor", {"backfill": False}).fixed["backfill"] is False
    with pytest.raises(LiveError, match=r"cannot fix nosuch: .*\(the live knobs are searched; "
                                        r"those that can be fixed: placement, PriorityFlags, TRESBillingWeights.GRES/gpu, "
                                        r"TRESBillingWeights.CPU, backfill, "
                                        r"reserve_after, sched_interval, default_queue_depth, batch_sched_delay\)$"):
        live_space("multifactor", {"nosuch": 3})
    # a managed knob cannot be fixed; the error says how to hold it (its error said "not a
    # non-live knob", which told an operator nothing)
    with pytest.raises(LiveError, match=r"^cannot fix PriorityWeightAge: a knob with a live Slurm "
                                        r"setting, which the agent manages; to keep the agent off "
                                        r"it, bound it to one value \(PriorityWeightAge in \[V, V\]\)$"):
        live_space("multifactor", {"PriorityWeightAge": 3})
    with pytest.raises(LiveError, match="no knob with a live Slurm setting"):
        live_space("tiresias")


def test_compound_tres_weights_are_one_setting_both_ways():
    ls = live_space("multifactor")
    cfg = ls.full({"PriorityWeightTRES.GRES/gpu": 2000, "PriorityWeightTRES.CPU": 500})
    settings = ls.to_settings(cfg)
    assert settings["PriorityWeightTRES"] == "GRES/gpu=2000,CPU=500"
    assert not any("." in name for name in settings)
    # scontrol's spelling, another order; an entry Slurm does not list weighs 0
    back = ls.from_settings({**settings, "PriorityWeightTRES": "CPU=500,GRES/gpu=2000"})
    assert back["PriorityWeightTRES.GRES/gpu"] == 2000 and back["PriorityWeightTRES.CPU"] == 500
    assert ls.from_settings({**settings, "PriorityWeightTRES": "(null)"})["PriorityWeightTRES.CPU"] == 0
    assert same_value("PriorityWeightTRES", "CPU=0,GRES/gpu=2000", "GRES/gpu=2000")
    assert not same_value("PriorityWeightTRES", "CPU=1,GRES/gpu=2000", "GRES/gpu=2000")
    assert same_value("PriorityWeightTRES", None, "GRES/gpu=0,CPU=0")


def test_the_live_subspace_pins_fixed_knobs_and_narrows_managed_ones():
    ls = live_space("multifactor", {"reserve_after": 3600.0})
    running = ls.full({"PriorityWeightAge": 1000})
    sub = live_subspace("multifactor", ls.fixed, running, {"PriorityWeightAge": (0, 5000)}, max_step=0.1)
    space = Multifactor.space.restrict(sub)
    assert space.pinned["reserve_after"] == 3600.0 and set(space.pinned) == set(ls.fixed)
    with pytest.raises(ConfigError, match="held at 3600.0 in this search"):
        space.validate({"reserve_after": 60.0})
    age = space["PriorityWeightAge"]
    assert (age.low, age.high) == (0, 5000)  # bounds, then +-10% of 100000 around 1000
    js = space["PriorityWeightJobSize"]
    assert (js.low, js.high) == (0, 11000)
    # bf_max_job_test is log-scaled: +-10% of the log range it is searched in (100-5000), a factor
    # of 50 ** 0.1 = 1.479 around 500: 338.1 .. 739.5, whole jobs inward
    bf = space["bf_max_job_test"]
    assert (bf.low, bf.high, bf.search) == (339, 739, None)
    assert space.default() == running  # the search starts from the running config
    # every config of the live view is a config of the policy
    import random
    for c in (space.sample(random.Random(i)) for i in range(20)):
        assert Multifactor.space.validate(c) == c


def test_the_live_subspace_keeps_a_running_value_its_step_would_leave_out_of_the_default():
    # a running PriorityMaxAge of 840 s (a compressed-time cluster) with a step of 0.25 of the log
    # range [600 s, 60 d]: the range becomes 840 / f .. 840 * f with f = 8640 ** 0.25 = 9.64, i.e.
    # [600, 8098.6] s, which leaves out the knob's default of 7 d (604800 s); the search starts
    # from the running value instead of failing the live view
    ls = live_space("multifactor")
    running = ls.full({"PriorityMaxAge": 840.0, "PriorityWeightAge": 90000})
    space = Multifactor.space.restrict(live_subspace("multifactor", ls.fixed, running, max_step=0.25))
    age = space["PriorityMaxAge"]
    assert (age.low, round(age.high, 1)) == (600.0, round(840 * 8640 ** 0.25, 1)) == (600.0, 8098.6)
    assert age.default == 840.0
    # an Int knob: weight 90000 +- 25000 -> [65000, 100000], its default the running 90000
    w = space["PriorityWeightAge"]
    assert (w.low, w.high, w.default) == (65000, 100000, 90000)
    # 1000 +- 25000 -> [0, 26000], the default stays at the running 1000
    js = space["PriorityWeightJobSize"]
    assert (js.low, js.high, js.default) == (0, 26000, 1000)
    assert space.default() == running


def test_settings_round_trip_and_bf_flags():
    ls = live_space("multifactor")
    cfg = ls.full({"PriorityMaxAge": 7200.0, "PriorityFavorSmall": True})
    s = ls.to_settings(cfg)
    assert s["PriorityMaxAge"] == "0-02:00:00" and s["PriorityFavorSmall"] == "YES"
    assert ls.from_settings(s) == {k: cfg[k] for k in ls.names}
    with pytest.raises(LiveError, match="no value for PriorityWeightAge"):
        ls.from_settings({k: v for k, v in s.items() if k != "PriorityWeightAge"})


def test_same_value():
    assert same_value("PriorityMaxAge", "7-0", "7-00:00:00")
    assert same_value("PriorityCalcPeriod", "5", "00:05:00")
    assert same_value("PriorityFavorSmall", "YES", "Yes")
    assert same_value("PriorityWeightTRES", "CPU=1,GRES/gpu=2", "GRES/gpu=2,CPU=1")
    assert not same_value("PriorityWeightAge", "1000", "100")
    assert not same_value("PriorityWeightAge", None, "1")


SHOW_CONFIG = """Configuration data as of 2026-12-03T02:46:20
PriorityDecayHalfLife   = 1-00:00:00
PriorityCalcPeriod      = 00:01:00
PriorityFavorSmall      = No
PriorityMaxAge          = 7-00:00:00
PriorityUsageResetPeriod = NONE
PriorityWeightFairShare = 10000
PriorityWeightTRES      = CPU=1000,GRES/gpu=2000
SchedulerParameters     = bf_window=1440,bf_continue,max_rpc_cnt=8
SchedulerType           = sched/backfill
"""


def test_show_config_to_live_settings():
    live = live_settings(parse_show_config(SHOW_CONFIG))
    assert live == {"PriorityDecayHalfLife": "1-00:00:00", "PriorityCalcPeriod": "00:01:00",
                    "PriorityFavorSmall": "No", "PriorityMaxAge": "7-00:00:00",
                    "PriorityWeightFairshare": "10000",
                    "PriorityWeightTRES": "CPU=1000,GRES/gpu=2000",
                    "bf_window": "1440", "bf_continue": ""}


NODES = """NodeName=n1 Arch=x86_64 CoresPerSocket=1 Gres=gpu:8 Partitions=gpu,debug State=IDLE
NodeName=n2 Gres=gpu:a100:8(S:0-1) Partitions=gpu State=IDLE
NodeName=login Gres=(null) Partitions=cpu State=IDLE
"""


def test_cluster_from_scontrol_nodes():
    assert node_gpus("gpu:a100:4(S:0),gpu:v100:2") == 6 and node_gpus("(null)") == 0
    setup = setup_from_slurm({}, parse_nodes(NODES), [], "Account|User|ParentName|Share\nroot|||1\n", "")
    c = setup.cluster_spec()
    assert (c.nodes, c.gpus_per_node, c.uniform) == (2, 8, True)  # login has no GPU
    assert c.slurm_partitions == ()  # no partition listed: one pool
    # partitions that do not overlap stay Slurm partitions of one pool (fair share is one tree
    # across them, as in slurmctld), not separate VCs
    split = setup_from_slurm({}, parse_nodes("NodeName=a Gres=gpu:4 Partitions=p1\n"
                                             "NodeName=b Gres=gpu:4 Partitions=p2\n"
                                             "NodeName=c Gres=gpu:4 Partitions=p2\n"),
                             parse_nodes("PartitionName=p1\nPartitionName=p2 Default=YES\n"), "", "")
    spec = split.cluster_spec()
    assert spec.uniform and spec.nodes == 3
    assert [(p.name, p.nodes) for p in spec.slurm_partitions] == [("p2", (1, 2)), ("p1", (0,))]
    with pytest.raises(LiveError, match="no node has GPUs"):
        setup_from_slurm({}, parse_nodes("NodeName=x Gres=(null)\n"), [], "", "")


def test_queue_rows_fill_in_what_sacct_has_not_recorded():
    sacct = HEADER + "\n" + row("1", 1000, 1000, 1100, 2) + "\n"
    squeue = ("1|2026-01-01T00:00:00|2026-01-01T00:00:00|gres:gpu:2|alice|physics|gpu|RUNNING|1|5:00\n"
              "7|2026-01-01T00:10:00|N/A|gres:gpu:4|bob|chemistry|gpu|PENDING|1|1:00:00\n")
    jobs = read_jobs(add_queue_rows(sacct, squeue))
    assert jobs.job_id.tolist() == ["1", "7"]
    assert jobs.finished.tolist() == [True, False]
    assert jobs.gpus.tolist() == [2, 4] and jobs.time_limit[1] == 3600.0
    assert jobs.user[1] == "bob" and jobs.account[1] == "chemistry"


def test_read_jobs_counts_malformed_rows_but_not_queued_ones():
    text = "\n".join([
        HEADER,
        row("1", 1000, 1010, 1110, 2),
        row("1.batch", 1000, 1010, 1110, 2),  # a step: folded into job 1
        row("2", 1000, 1020, None, 4),  # running: not malformed
        row("3", 1000, None, None, 1),  # pending
        "4|garbage|x|y|gres/gpu=1|gres/gpu=1|a|b|gpu|COMPLETED|j|1|1",  # bad times
        "5|2026-01-01T00:00:00|2026",  # partial row
        row("6", 1000, 1000, 1000, 1),  # zero run time: not replayable
    ]) + "\n"
    jobs = read_jobs(text)
    assert jobs.job_id.tolist() == ["1", "2", "3"]
    assert jobs.finished.tolist() == [True, False, False]
    assert jobs.duration[0] == 100 and jobs.start[0] == 1010 and jobs.end[0] == 1110
    assert jobs.malformed == 3


def test_merge_sacct_replaces_rows_by_job_id():
    a = HEADER + "\n" + row("1", 0, None, None, 1) + "\n" + row("2", 0, 5, 9, 1) + "\n"
    b = HEADER + "\n" + row("1", 0, 3, 8, 1) + "\n" + row("3", 4, None, None, 2) + "\n"
    merged = merge_sacct(a, b)
    assert merged.splitlines() == [HEADER, row("1", 0, 3, 8, 1), row("2", 0, 5, 9, 1),
                                   row("3", 4, None, None, 2)]
    assert merge_sacct("", b) == b and merge_sacct(a, "") == a
    with pytest.raises(LiveError, match="sacct columns changed"):
        merge_sacct(a, "JobID|Submit\n1|x\n")


def test_runner_timeout_names_the_command():
    r = SlurmRunner(timeout=0.5, retries=0)
    with pytest.raises(SlurmUnavailable, match=r"`sleep 5` did not answer within 0.5 s"):
        r.run(["sleep", "5"])


def test_runner_retries_reads_with_backoff_when_the_controller_does_not_answer():
    r = SlurmRunner(timeout=10, retries=2, backoff=0.1)
    script = "echo 'sinfo: error: Unable to contact slurm controller (connect failure)' >&2; exit 1"
    t0 = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="could not reach Slurm: .*Unable to contact"):
        r.run(["sh", "-c", script])
    assert len(r.calls) == 3 and time.monotonic() - t0 >= 0.1 + 0.2
    r.calls.clear()
    with pytest.raises(SlurmUnavailable):
        r.run(["sh", "-c", script], read=False)  # writes are not retried
    assert len(r.calls) == 1


def test_runner_other_failures_and_missing_commands():
    r = SlurmRunner(retries=2)
    with pytest.raises(LiveError, match=r"`sh -c echo nope >&2; exit 3` failed \(exit 3\): nope"):
        r.run(["sh", "-c", "echo nope >&2; exit 3"])
    assert len(r.calls) == 1
    with pytest.raises(LiveError, match="`no-such-sacct` not found"):
        r.run(["no-such-sacct"])


def test_prune_sacct_drops_jobs_that_ended_long_ago_with_their_steps():
    from autosched.live.history import prune_sacct

    text = "\n".join([HEADER, row("1", 0, 10, 100, 1), row("1.batch", 0, 10, 100, 1),
                      row("2", 0, 10, None, 1), row("3", 50, 60, 500, 1)]) + "\n"
    assert prune_sacct(text, 200).splitlines() == [HEADER, row("2", 0, 10, None, 1),
                                                   row("3", 50, 60, 500, 1)]
    assert prune_sacct(text, 0) == text


def test_bf_knobs_are_managed_generically():
    # a policy that declared bf_* knobs (none does yet) would have them managed like this
    from autosched.live.knobs import LiveSpace
    from autosched.space import Bool, Int

    ls = LiveSpace("x", (Int("bf_window", "minutes looked ahead", low=1, high=43200, default=1440,
                             unit="min"),
                         Bool("bf_continue", "continue after a lock release", default=False)))
    assert ls.to_settings({"bf_window": 2880, "bf_continue": True}) == {
        "bf_window": "2880", "bf_continue": ""}
    assert ls.to_settings({"bf_window": 2880, "bf_continue": False}) == {"bf_window": "2880"}
    live = live_settings(parse_show_config(SHOW_CONFIG))
    assert ls.from_settings(live) == {"bf_window": 1440, "bf_continue": True}
    assert ls.from_settings({}) == {"bf_window": 1440, "bf_continue": False}  # Slurm's defaults


def test_the_include_file_is_replaced_by_a_rename_so_its_directory_must_be_writable(tmp_path, monkeypatch):
    """docs/slurm.md: every write of the include file is a new file renamed over it (a new
    inode), so the file's directory must be writable; where a file cannot be made in it (a
    read-only /etc/slurm: PermissionError, as mkstemp raises for a non-root user), the write is
    one error naming the file, and the old file stays as it was."""
    import os
    import tempfile

    from autosched.live.slurm import SlurmConnector

    inc = tmp_path / "autosched.conf"
    inc.write_text("# old\n")
    conn = SlurmConnector(inc, tmp_path / "slurm.conf")
    before = inc.stat().st_ino
    conn._write("PriorityWeightAge=5\n")
    assert inc.read_text() == "PriorityWeightAge=5\n" and inc.stat().st_ino != before

    def read_only_dir(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(tempfile, "mkstemp", read_only_dir)
    with pytest.raises(LiveError) as e:
        conn._write("PriorityWeightAge=7\n")
    assert str(e.value) == f"{inc}: cannot write (Permission denied)"
    assert inc.read_text() == "PriorityWeightAge=5\n"
    assert sorted(os.listdir(tmp_path)) == ["autosched.conf"]
