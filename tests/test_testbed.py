"""The real test components themselves: the Slurm testbed cluster and the headless browser."""

from __future__ import annotations

import functools
import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed import SCRIPT, free_port_bases, missing_slurm, unavailable


def _node_fields(text: str) -> list[dict[str, str]]:
    """`scontrol -o show node` lines -> one dict of Key=Value per node."""
    nodes = []
    for line in text.splitlines():
        if line.strip():
            nodes.append(dict(re.findall(r"(\w+)=(\S*)", line)))
    return nodes


@pytest.mark.slurm
def test_cluster_has_four_idle_nodes_with_eight_gpus(slurm_testbed):
    out = slurm_testbed.run("scontrol", "-o", "show", "node").stdout
    nodes = _node_fields(out)
    assert sorted(n["NodeName"] for n in nodes) == ["n1", "n2", "n3", "n4"]
    for node in nodes:
        assert node["Gres"] == "gpu:8", node
        assert node["State"] == "IDLE", node


@pytest.mark.slurm
def test_gpu_job_is_accounted_with_user_account_and_gpus(slurm_testbed):
    job = slurm_testbed.sbatch(3, 1, user="bob", account="chemistry", name="tb-acct")
    slurm_testbed.wait_all_done(timeout=60)
    expected = {"JobID": str(job), "User": "bob", "Account": "chemistry", "State": "COMPLETED",
                "JobName": "tb-acct"}
    # slurmctld sends the job's records to slurmdbd asynchronously. Once (load ~10, 1 run in ~10)
    # the row read back COMPLETED but with "allocation", slurmdbd's name for a job whose start
    # record had no name yet: poll until the whole row matches (or 30 s), then compare.
    deadline = time.monotonic() + 30
    rows: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        out = slurm_testbed.run("sacct", "-a", "--parsable2", "-X", "-S", "2020-01-01", "-j",
                                str(job), "-o", "JobID,User,Account,AllocTRES,State,JobName").stdout
        header, *lines = out.strip().splitlines()
        rows = [dict(zip(header.split("|"), line.split("|"))) for line in lines]
        if len(rows) == 1 and {k: rows[0][k] for k in expected} == expected:
            break
        time.sleep(0.5)
    assert len(rows) == 1, rows
    row = rows[0]
    assert {k: row[k] for k in expected} == expected
    assert "gres/gpu=3" in row["AllocTRES"].split(","), row["AllocTRES"]


def _config_value(bed, key: str) -> str:
    out = bed.run("scontrol", "show", "config").stdout
    match = re.search(rf"^{key}\s*=\s*(.*)$", out, re.MULTILINE)
    assert match, f"{key} not in scontrol show config"
    return match.group(1).strip()


@pytest.mark.slurm
def test_include_file_overrides_slurm_conf_on_reconfigure(slurm_testbed):
    bed = slurm_testbed
    assert bed.conf.read_text().rstrip().splitlines()[-1] == f"Include {bed.include}"
    assert _config_value(bed, "PriorityWeightAge") == "1000"  # the value in slurm.conf
    before = bed.include.read_text()
    try:
        bed.include.write_text(before + "PriorityWeightAge=4321\n")
        bed.reconfigure()
        assert _config_value(bed, "PriorityWeightAge") == "4321"
    finally:
        bed.include.write_text(before)
        bed.reconfigure()
    assert _config_value(bed, "PriorityWeightAge") == "1000"


@pytest.mark.slurm
def test_start_of_a_running_cluster_keeps_it_and_its_ports(slurm_testbed):
    bed = slurm_testbed
    pids = {p.name: p.read_text() for p in (bed.root / "run").glob("*.pid")}
    assert {"munged.pid", "mariadbd.pid", "slurmdbd.pid", "slurmctld.pid", "slurmd-n1.pid"} <= set(pids)
    bed.script("start")  # idempotent: nothing to start
    assert {p.name: p.read_text() for p in (bed.root / "run").glob("*.pid")} == pids
    other = dict(bed.env, TESTBED_ROOT=str(bed.root), TESTBED_PORT_BASE=str(bed.port_base + 40))
    res = subprocess.run(["bash", str(SCRIPT), "start"], env=other, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 1
    assert f"runs with port base {bed.port_base}" in res.stderr, res.stderr
    assert f"Port={bed.port_base + 11}-{bed.port_base + 14}" in bed.conf.read_text()


@pytest.mark.slurm
def test_slurmctld_restart_keeps_the_cluster(slurm_testbed):
    bed = slurm_testbed
    bed.stop_slurmctld()
    res = bed.run("scontrol", "ping", check=False, timeout=30)
    assert "DOWN" in res.stdout, res.stdout
    bed.start_slurmctld()
    assert "UP" in bed.run("scontrol", "ping").stdout
    job = bed.sbatch(1, 0, user="carol")
    bed.wait_all_done(timeout=60)
    assert job > 0


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.mark.browser
def test_browser_reads_a_local_page(browser, tmp_path: Path):
    (tmp_path / "index.html").write_text(
        "<html><head><title>testbed page</title></head>"
        "<body><p id='greeting'>hello from 127.0.0.1</p></body></html>")
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        assert browser.title == "testbed page"
        assert browser.find_element("id", "greeting").text == "hello from 127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


GUARDED = '''
import pytest

@pytest.mark.slurm
def test_needs_slurm():
    pytest.skip("no cluster here")

@pytest.mark.browser
def test_needs_browser():
    pytest.skip("no browser here")

@pytest.mark.prometheus
def test_needs_prometheus():
    pytest.skip("no prometheus here")

def test_plain():
    pass
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
@pytest.mark.parametrize("ci", ["true", ""])
def test_ci_fails_the_run_when_real_component_tests_skip(tmp_path, ci, workers):
    # A real pytest run of a tiny test file with this plugin: skips pass locally, fail with CI=true.
    (tmp_path / "test_guarded.py").write_text(GUARDED)
    env = dict(os.environ, CI=ci, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "testbed", "-p", "no:cacheprovider",
                          "-q", "-rs", *workers, str(tmp_path / "test_guarded.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    message = ("error: CI=true but 3 test(s) needing real components (Slurm/Chromium/Prometheus) "
               "were skipped")
    if ci:
        assert res.returncode == 1, res.stdout + res.stderr
        assert message in res.stdout
    else:
        assert res.returncode == 0, res.stdout + res.stderr
        assert "3 skipped" in res.stdout and message not in res.stdout


GROUPED = '''
import os
import pytest

@pytest.mark.slurm
@pytest.mark.parametrize("i", range(6))
def test_on_which_worker(i):
    with open(os.environ["WORKER_LOG"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    pass
'''


def test_slurm_tests_share_one_xdist_worker(tmp_path):
    # Under `-n 2 --dist loadgroup` every slurm test must land on the same worker (one cluster).
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    log = tmp_path / "workers.txt"
    env = dict(os.environ, WORKER_LOG=str(log), PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "testbed", "-p", "no:cacheprovider",
                          "-q", "-n", "2", "--dist", "loadgroup", str(tmp_path / "test_grouped.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    workers = log.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


@pytest.fixture
def script_env(tmp_path):
    """Env for running scripts/slurm-testbed.sh on a root of its own (no cluster started)."""
    reason = missing_slurm()
    if reason:
        unavailable(reason)
    root = Path("/tmp") / f"astb-t-{os.getpid()}-{tmp_path.name[-8:]}"
    yield dict(os.environ, TESTBED_ROOT=str(root), TESTBED_PORT_BASE="23900")
    subprocess.run(["bash", str(SCRIPT), "stop"], env=dict(os.environ, TESTBED_ROOT=str(root)),
                   capture_output=True, timeout=60)
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def _script(env, *args):
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slurm
def test_start_names_the_busy_ports_and_starts_nothing(script_env):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # slurmd n2 listens on base + 12
        env = dict(script_env, TESTBED_PORT_BASE=str(port - 12))
        res = _script(env, "start", "--fresh")
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == (
        f"testbed: error: ports in use on 127.0.0.1: {port} (choose another TESTBED_PORT_BASE)")
    assert not Path(script_env["TESTBED_ROOT"], "run").exists()


@pytest.mark.parametrize("value", ["2", "one", "-1"])
@pytest.mark.slurm
def test_a_def_cpu_per_gpu_the_nodes_cannot_give_is_refused_before_anything_starts(value, script_env):
    res = _script(dict(script_env, TESTBED_DEF_CPU_PER_GPU=value), "start", "--fresh")
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == (
        f"testbed: error: TESTBED_DEF_CPU_PER_GPU={value}: must be 1 or empty (a node has 8 CPUs for its 8 GPUs)")
    assert not Path(script_env["TESTBED_ROOT"]).exists()


@pytest.mark.slurm
def test_fresh_start_refuses_to_wipe_a_foreign_directory(script_env):
    root = Path(script_env["TESTBED_ROOT"])
    root.mkdir()
    (root / "precious.txt").write_text("keep me")
    res = _script(script_env, "start", "--fresh")
    assert res.returncode == 1
    assert "is not a testbed root" in res.stderr and "refusing" in res.stderr
    assert (root / "precious.txt").read_text() == "keep me"


@pytest.mark.slurm
def test_stop_and_status_of_a_cluster_that_never_ran(script_env):
    assert _script(script_env, "stop").returncode == 0  # no root: nothing to do
    Path(script_env["TESTBED_ROOT"]).mkdir()
    res = _script(script_env, "status")
    assert res.returncode == 3, res.stdout  # 3: something is not running
    assert "slurmctld    stopped" in res.stdout


def _processes_with_env(entry: str, comm: str | None = None) -> list[int]:
    """Live (non-zombie) processes whose environment holds `entry` (and named `comm`)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if comm is not None and (proc / "comm").read_text().strip() != comm:
                continue
            if entry.encode() in (proc / "environ").read_bytes().split(b"\0"):
                if "\tZ" not in (proc / "status").read_text().split("State:", 1)[1][:4]:
                    found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found


def _cluster_with_a_job(script_env, command: str) -> tuple[dict[str, str], str]:
    """A started test cluster running one job of `command`, its slurmctld stopped so that the
    job cannot be cancelled (slurmstepd outlives slurmd); its env and the jobs' environ entry."""
    root = Path(script_env["TESTBED_ROOT"])
    env = dict(script_env, TESTBED_PORT_BASE=str(next(free_port_bases("master"))))
    assert _script(env, "start", "--fresh").returncode == 0
    conf_entry = f"SLURM_CONF={root}/etc/slurm.conf"
    slurm_env = dict(env, SLURM_CONF=str(root / "etc" / "slurm.conf"))
    job = subprocess.run(["runuser", "-u", "carol", "--", "sbatch", "--parsable", "--chdir=/tmp",
                          "-o", "/dev/null", "-t", "5", "--wrap", command], env=slurm_env,
                         cwd="/tmp", capture_output=True, text=True, timeout=30)
    assert job.returncode == 0, job.stderr
    deadline = time.monotonic() + 30
    while not _processes_with_env(conf_entry, "sleep") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with_env(conf_entry, "slurmstepd"), "the job step never started"
    assert _script(env, "stop", "slurmctld").returncode == 0
    return env, conf_entry


@pytest.mark.slurm
def test_stop_leaves_no_job_processes_even_without_a_controller(script_env):
    env, conf_entry = _cluster_with_a_job(script_env, "sleep 300")
    res = _script(env, "stop")
    assert res.returncode == 0, res.stderr
    assert "ending job processes left behind" in res.stderr
    assert _processes_with_env(conf_entry) == []


def _frozen(pids: list[int]) -> list[int]:
    """Those of `pids` stopped by a signal (state T)."""
    out = []
    for pid in pids:
        try:
            if "\tT" in Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1][:4]:
                out.append(pid)
        except OSError:
            continue
    return out


@pytest.mark.slurm
def test_stop_interrupted_while_freezing_job_processes_leaves_none_frozen(script_env):
    """`stop` freezes a job's tree before killing it; a SIGTERM in between must kill what it froze
    (a frozen process that has left the tree is found by no later scan)."""
    env, conf_entry = _cluster_with_a_job(script_env, "for i in $(seq 60); do sleep 300 & done; wait")
    stop = subprocess.Popen(["bash", str(SCRIPT), "stop"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert stop.stderr is not None
        for line in stop.stderr:
            if "ending job processes left behind" in line:
                stop.send_signal(15)
                break
        code = stop.wait(timeout=60)
        deadline = time.monotonic() + 10  # a process killed while stopped takes a moment to go
        while (frozen := _frozen(_processes_with_env(conf_entry))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert frozen == []
        assert code == 143, "stop was not interrupted while freezing"  # its trap ran
    finally:
        stop.kill()
        res = _script(env, "stop")
    assert res.returncode == 0, res.stderr
    assert _processes_with_env(conf_entry) == []


@pytest.mark.slurm
def test_stop_kills_what_a_stop_killed_mid_freeze_left_frozen(script_env):
    """A stop killed (SIGKILL, no trap) between its freeze and its kill leaves the list it wrote
    first: the next stop kills each process on it that is still the same one (its start time),
    even one no longer in any job's tree, and leaves a reused PID alone."""
    root = Path(script_env["TESTBED_ROOT"])
    (root / "run").mkdir(parents=True)
    orphan = subprocess.Popen(["sleep", "300"])
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        orphan.send_signal(signal.SIGSTOP)
        start = Path(f"/proc/{orphan.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
        (root / "run" / "frozen.pids").write_text(f"{orphan.pid} {start}\n{bystander.pid} 1\n")
        res = _script(script_env, "stop")
        assert res.returncode == 0, res.stderr
        assert "ending job processes an interrupted stop left frozen" in res.stderr
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None  # its start time is not the one listed: a reused PID
        assert not (root / "run" / "frozen.pids").exists()
    finally:
        for p in (orphan, bystander):
            p.kill()
            p.wait()
