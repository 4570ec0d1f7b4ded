"""Real components for tests: a Slurm cluster (scripts/slurm-testbed.sh), a headless Chromium and
a Prometheus server.

Loaded from tests/conftest.py as a plugin. Tests marked ``slurm`` use the session fixture
``slurm_testbed`` (one fresh 4-node x 8-GPU cluster per session, on one xdist worker); tests
marked ``browser`` use ``browser`` (a Selenium driver for Debian's chromium); tests marked
``prometheus`` use ``prometheus_bin`` (Debian's prometheus, which a test starts itself). Locally a
missing component skips with one line saying why; with ``CI=true`` it is a failure, and the
session fails if any ``slurm``/``browser``/``prometheus`` test was skipped, so CI can never go
green without the real components.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chromium_kit import CHROMEDRIVER, CHROMIUM, start_chromium

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm-testbed.sh"
REAL_MARKERS = ("slurm", "browser", "prometheus")
PROMETHEUS = Path("/usr/bin/prometheus")  # Debian's (scripts/slurm-testbed.sh install)
DEFAULT_PORT_BASE = 24000
PORT_SPAN = 20  # ports B..B+19 (see the script's header)
SLURM_PROGRAMS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacctmgr")


def in_ci() -> bool:
    """CI sets CI=true; then missing real components fail instead of skipping."""
    return os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> None:
    """Skip locally, fail in CI: a real-component test must not pass silently in CI."""
    if in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


class TestbedError(AssertionError):
    """A testbed command failed or timed out (an AssertionError so the test reads as failed)."""

    __test__ = False  # not a test class, although the name starts with "Test"


@dataclass
class Testbed:
    """A running Slurm cluster made by scripts/slurm-testbed.sh; the handle tests use.

    `env` is os.environ plus SLURM_CONF: pass it to any subprocess that runs Slurm commands.
    `include` is the file slurm.conf includes last (autosched's live layer owns it).
    """

    __test__ = False  # not a test class, although the name starts with "Test"

    root: Path
    port_base: int
    env: dict[str, str]
    conf: Path
    include: Path
    nodes: tuple[str, ...] = ("n1", "n2", "n3", "n4")
    gpus_per_node: int = 8
    users: tuple[str, ...] = ("alice", "bob", "carol")
    accounts: dict[str, int] = field(default_factory=lambda: {"physics": 60, "chemistry": 40})
    # partition -> (nodes, PriorityTier, TRESBillingWeights), as scripts/slurm/slurm.conf.in sets
    # them; gpu is the default
    partitions: dict[str, tuple[tuple[str, ...], int, str]] = field(default_factory=lambda: {
        "gpu": (("n1", "n2", "n3", "n4"), 1, "CPU=1.0,GRES/gpu=4.0"),
        "urgent": (("n1", "n2"), 2, "CPU=2.0,GRES/gpu=8.0")})

    def run(self, *argv: str, user: str | None = None, timeout: float = 30,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command with the cluster's env (as `user` via runuser); raise TestbedError on a
        non-zero exit (when `check`) or when it outlives `timeout` seconds."""
        cmd = list(argv) if user is None else ["runuser", "-u", user, "--", *argv]
        try:
            # cwd=/tmp: the test users cannot enter root's working directories
            res = subprocess.run(cmd, env=self.env, cwd="/tmp", capture_output=True, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise TestbedError(f"`{' '.join(cmd)}` did not finish within {timeout} s") from exc
        if check and res.returncode != 0:
            raise TestbedError(f"`{' '.join(cmd)}` exited {res.returncode}: "
                               f"{(res.stderr or res.stdout).strip()}")
        return res

    def script(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run scripts/slurm-testbed.sh for this cluster."""
        env = dict(self.env, TESTBED_ROOT=str(self.root), TESTBED_PORT_BASE=str(self.port_base))
        cmd = ["bash", str(SCRIPT), *args]
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise TestbedError(f"`slurm-testbed.sh {' '.join(args)}` did not finish within "
                               f"{timeout} s") from exc
        if res.returncode != 0:
            raise TestbedError(f"`slurm-testbed.sh {' '.join(args)}` exited {res.returncode}:\n"
                               f"{res.stderr.strip()}")
        return res

    def sbatch(self, gpus: int, seconds: float, *, user: str = "alice", account: str = "physics",
               time_limit: str = "5", begin: str | None = None, name: str | None = None,
               partition: str | None = None, extra: Sequence[str] = ()) -> int:
        """Submit `sleep seconds` on `gpus` GPUs as `user` (to `partition`, default gpu); return
        the job id.

        Output goes to /dev/null: job ids restart at 1 on a fresh cluster, so any file name
        would collide with a stale one (see docs/testbed.md)."""
        argv = ["sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-A", account,
                "-t", time_limit]
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
        if begin is not None:
            argv.append(f"--begin={begin}")
        if name is not None:
            argv.append(f"--job-name={name}")
        if partition is not None:
            argv.append(f"--partition={partition}")
        argv += [*extra, "--wrap", f"sleep {seconds}"]
        out = self.run(*argv, user=user).stdout.strip()
        return int(out.split(";")[0])

    def queue(self) -> list[str]:
        """Job ids still known to squeue (pending, running, completing)."""
        out = self.run("squeue", "-h", "-o", "%i", timeout=10).stdout
        return out.split()

    def wait_all_done(self, timeout: float = 60) -> None:
        """Block until squeue is empty; TestbedError with the queue if `timeout` s pass first."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.queue()
            if not left:
                return
            if time.monotonic() >= deadline:
                raise TestbedError(f"jobs still queued after {timeout} s: {' '.join(left)}\n"
                                   + self.run("squeue", timeout=10).stdout)
            time.sleep(0.5)

    def reconfigure(self) -> None:
        """`scontrol reconfigure`: slurmctld re-reads slurm.conf and the include file."""
        self.run("scontrol", "reconfigure")

    def stop_slurmctld(self) -> None:
        """Stop only slurmctld (SIGTERM by PID): clients then fail as with a dead controller."""
        self.script("stop", "slurmctld", timeout=60)

    def start_slurmctld(self) -> None:
        """Start whatever is stopped and wait until all nodes respond again."""
        self.script("start", timeout=120)

    def restart_slurmctld(self) -> None:
        """Stop and start slurmctld (e.g. for keys that `scontrol reconfigure` does not apply)."""
        self.stop_slurmctld()
        self.start_slurmctld()


def missing_slurm() -> str | None:
    """Why a Slurm test cluster cannot start here (one line), or None when it can."""
    if not SCRIPT.exists():
        return f"{SCRIPT} is missing"
    missing = [p for p in SLURM_PROGRAMS
               if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    if missing:
        return f"Slurm test cluster needs {', '.join(missing)} (scripts/slurm-testbed.sh install)"
    if os.geteuid() != 0:
        return "Slurm test cluster needs root (it starts daemons as the slurm/mysql/munge users)"
    return None


def _ports_free(base: int) -> bool:
    """Nothing listens on 127.0.0.1 ports base..base+PORT_SPAN-1."""
    for port in range(base, base + PORT_SPAN):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


def free_port_bases(worker: str) -> Iterator[int]:
    """Free port bases to try: AUTOSCHED_TESTBED_PORT_BASE (or 24000) + 100 per xdist worker,
    then on in steps of 1000 past blocks that are busy."""
    base = int(os.environ.get("AUTOSCHED_TESTBED_PORT_BASE", DEFAULT_PORT_BASE))
    if worker.startswith("gw"):
        base += 100 * int(worker[2:])
    found = 0
    for attempt in range(20):
        candidate = base + 1000 * attempt
        if candidate + PORT_SPAN < 65536 and _ports_free(candidate):
            found += 1
            yield candidate
    if not found:
        raise TestbedError(f"no free block of {PORT_SPAN} ports from {base} (tried 20 blocks)")


@pytest.fixture(scope="session")
def slurm_testbed(request: pytest.FixtureRequest) -> Iterator[Testbed]:
    """A fresh real Slurm cluster for the session: 4 nodes x 8 fake GPUs, slurmdbd + MariaDB,
    accounts physics(60)/chemistry(40), users alice/bob/carol, partitions gpu (all nodes, tier 1,
    the default) and urgent (n1-n2, tier 2), each with its own billing weights. Stopped at
    session end."""
    reason = missing_slurm()
    if reason:
        unavailable(reason)
    # Short path under /tmp: munge/MySQL socket paths must stay < 108 bytes, and pytest's own tmp
    # dirs are mode 0700, which the slurm/mysql/munge users cannot enter.
    root = Path(tempfile.mkdtemp(prefix="astb-", dir="/tmp"))
    os.chmod(root, 0o755)
    worker = getattr(request.config, "workerinput", {}).get("workerid", "master")
    conf = root / "etc" / "slurm.conf"
    env = dict(os.environ, SLURM_CONF=str(conf))
    bed = Testbed(root=root, port_base=0, env=env, conf=conf,
                  include=root / "etc" / "autosched.conf")
    try:
        for tries, base in enumerate(free_port_bases(worker), 1):
            bed.port_base = base
            try:
                bed.script("start", "--fresh")
                break
            except TestbedError as exc:
                # Another session may have taken the ports between the probe and the bind:
                # move on (--fresh stops what this attempt started); any other failure is real.
                if "in use" not in str(exc) or tries == 3:
                    raise
        yield bed
    finally:
        try:
            bed.script("stop", timeout=120)
        finally:
            if not os.environ.get("AUTOSCHED_TESTBED_KEEP"):
                shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def _chromium_ready() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        unavailable(f"browser tests need {', '.join(missing)} "
                    "(scripts/slurm-testbed.sh install --browser)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        unavailable("browser tests need the selenium package (pip install -e '.[test]')")


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """Debian's prometheus server binary (each test starts and stops its own server)."""
    if not PROMETHEUS.exists():
        unavailable(f"the metrics test needs {PROMETHEUS} (scripts/slurm-testbed.sh install)")
    return PROMETHEUS


@pytest.fixture
def browser(_chromium_ready: None, tmp_path: Path) -> Iterator[object]:
    """A Selenium webdriver for Debian's headless Chromium with a fresh profile; quit after."""
    driver = start_chromium(tmp_path / "chromium-profile")
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


# --- hooks ------------------------------------------------------------------------------------

def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: needs a real Slurm cluster (fixture slurm_testbed)")
    config.addinivalue_line("markers", "browser: needs headless Chromium (fixture browser)")
    config.addinivalue_line("markers", "prometheus: needs Debian's prometheus (fixture "
                                       "prometheus_bin)")
    if hasattr(config, "workerinput"):  # an xdist worker: it reports the node ids
        config.pluginmanager.register(_GroupSuffix(), "autosched-xdist-group-suffix")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # One worker serves every slurm test so one cluster does. tryfirst: xdist reads the group
    # marker in its own hook of the same name.
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            item.add_marker(pytest.mark.xdist_group("slurm"))


class _GroupSuffix:
    """Make `--dist loadgroup` work on pytest >= 9.2 with pytest-xdist 3.8.

    xdist's worker tells the controller an item's group by appending "@group" to its node id, and
    does so by assigning `item._nodeid`; pytest 9.2 keeps the node id in `item._id` instead, so the
    assignment is silently lost and grouped tests spread over all workers (measured: the slurm
    tests ran on gw0 and gw1, each starting a cluster). Runs after xdist's hook and only adds the
    suffix where xdist's did not take.
    """

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):
            return
        try:
            from _pytest.nodeid import NodeId
        except ImportError:  # pytest < 9.2: xdist's own suffix works
            return
        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})
            if names and "@" not in item.nodeid and hasattr(item, "_id"):
                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


_REAL_SKIPS: list[str] = []  # node ids of skipped slurm/browser tests (this process)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Also runs on the xdist controller for the workers' reports; keywords carry the marker names.
    if report.skipped and any(m in report.keywords for m in REAL_MARKERS):
        _REAL_SKIPS.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if in_ci() and _REAL_SKIPS and not hasattr(session.config, "workerinput"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    skips = _REAL_SKIPS
    if in_ci() and skips:
        terminalreporter.write_line(
            f"error: CI=true but {len(skips)} test(s) needing real components "
            f"(Slurm/Chromium/Prometheus) "
            f"were skipped: {', '.join(skips[:5])}{' ...' if len(skips) > 5 else ''}", red=True)
