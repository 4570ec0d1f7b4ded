"""`SlurmConnector`: a running Slurm cluster through its command-line tools.

Reads with ``sacct`` (history), ``scontrol show node/partition/config`` and ``sacctmgr show
assoc/qos`` (the cluster's setup, `setup_from_slurm`), ``scontrol show config`` (live values);
writes only its own include file (``Include <file>`` at the end of slurm.conf, so its values win
over earlier ones), then ``scontrol reconfigure`` and a read-back of every
managed value; on any failure the previous file is put back and Slurm reconfigured again.

Every command goes through `SlurmRunner`: a timeout, a few retries with back-off for reads, and a
`SlurmUnavailable` naming the command when slurmctld does not answer. The commands run with
``TZ=UTC`` and ``SLURM_TIME_FORMAT=standard`` so that times read back as UTC wall-clock stamps.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..associations import parse_associations
from ..atomic import OutputError, check_input, read_text_input, write_text_atomic
from ..cluster import ClusterError, parse_billing_weights
from ..errors import InputError
from .backfill import BackfillStats, parse_sdiag
from .connector import IncludeChange, include_change, include_snapshot, undo_apply
from .errors import ApplyFailed, LiveError, SlurmUnavailable
from .knobs import BACKFILL_PREFIX, canonical, is_allowed, same_value
from .slurmconf import own_settings
from .twin import ClusterSetup, PartitionSetup, billed_tres_note

# No column a user writes freely (JobName, Comment, ...): sacct --parsable2 prints a `|` or a
# newline in such a cell as it is, so a job name could forge or hide rows. What is left is numbers,
# times, states and names Slurm checks (users, accounts, partitions, TRES).
SACCT_FIELDS = ("JobID", "Submit", "Start", "End", "AllocTRES", "ReqTRES", "User", "Account",
                "Partition", "State", "NCPUS", "Timelimit")
_BF_MARK = "# autosched manages these SchedulerParameters entries:"
# Entries the include file's own SchedulerParameters line carried before autosched managed it and
# that slurm.conf does not set: an operator's, kept at every write (the line replaces slurm.conf's).
_KEPT_MARK = "# kept from this file's SchedulerParameters (slurm.conf does not set them):"
# slurm.conf's own entries as the agent copied them into this file's line at its last write
_COPIED_MARK = "# copied from slurm.conf's SchedulerParameters:"
# squeue columns in the order of SACCT_FIELDS (End and AllocTRES are not known yet; no %j, as
# for sacct)
SQUEUE_FORMAT = "%i|%V|%S|%b|%u|%a|%P|%T|%C|%l"
_DOWN = ("unable to contact slurm controller", "connection refused", "socket timed out",
         "unable to establish connection", "slurmdbd", "unable to connect to database",
         "zero bytes were transmitted")
MAX_SLURM_CONF_BYTES = 1 << 20  # a slurm.conf is a few kilobytes; a larger file is not one
# stdout a Slurm command may print (`output_cap`): sacct/squeue about 4 million rows, the others
# (a cluster's config, nodes, partitions, associations) far more than the largest cluster's
MAX_HISTORY_OUTPUT_BYTES = 2**30
MAX_OUTPUT_BYTES = 64 * 2**20
_MAX_STDERR_BYTES = 64 * 1024  # of a failing command's stderr, the end (its last line says why)


@dataclass
class SlurmRunner:
    """Runs Slurm's client commands with a timeout, retrying reads with back-off."""

    slurm_conf: str | None = None  # SLURM_CONF for the commands (None: inherit)
    timeout: float = 30.0
    retries: int = 2  # extra attempts for reads
    backoff: float = 1.0  # seconds before the first retry, doubled each time
    bin_dir: str | None = None  # where the commands are (None: PATH)
    calls: list[str] = field(default_factory=list)  # commands run, for the status and tests

    def env(self) -> dict[str, str]:
        env = dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="standard")
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def check_conf(self) -> None:
        """`LiveError` naming slurm.conf when it is not a regular file (a FIFO would hold every
        Slurm command, a directory fails each in its own words): said once, before a command."""
        if self.slurm_conf:
            try:
                check_input(self.slurm_conf, "slurm.conf")
            except InputError as e:
                raise LiveError(str(e)) from None

    def run(self, args: Sequence[str], *, read: bool = True) -> str:
        """stdout of the command; `SlurmUnavailable` when it times out or cannot reach the
        daemons (after the retries, for reads), `LiveError` when it fails otherwise or prints
        more than `output_cap` allows. Output is decoded as UTF-8, a byte that is not (a job
        name in Latin-1, say) read as U+FFFD: Slurm prints what users typed as it is."""
        args = list(args)
        if self.bin_dir:
            args[0] = str(Path(self.bin_dir) / args[0])
        shown = " ".join(args)
        self.check_conf()
        attempts = 1 + (self.retries if read else 0)
        delay = self.backoff
        cap = output_cap(Path(args[0]).name)
        for attempt in range(attempts):
            self.calls.append(shown)
            try:
                code, out, errtext = _run_capped(args, self.env(), self.timeout, cap)
            except FileNotFoundError:
                raise LiveError(f"`{args[0]}` not found: install Slurm's client commands "
                                "(Debian: slurm-client)") from None
            except subprocess.TimeoutExpired:
                err: LiveError = SlurmUnavailable(
                    f"`{shown}` did not answer within {self.timeout:g} s (is slurmctld running?)")
            else:
                if code == 0:
                    return out
                # Slurm's own words: the last line of stderr, else of stdout
                msg = (errtext.strip().splitlines() or out.strip().splitlines()
                       or [f"exit status {code}"])[-1]
                if not any(s in errtext.lower() for s in _DOWN):
                    raise LiveError(f"`{shown}` failed (exit {code}): {msg}")
                err = SlurmUnavailable(f"`{shown}` could not reach Slurm: {msg}")
            if attempt + 1 < attempts:
                time.sleep(delay)
                delay *= 2
        raise err


def output_cap(command: str) -> int:
    """How many bytes of stdout `command` may print: the history's readers (``sacct``,
    ``squeue``) `MAX_HISTORY_OUTPUT_BYTES`, the others `MAX_OUTPUT_BYTES`."""
    return MAX_HISTORY_OUTPUT_BYTES if command in ("sacct", "squeue") else MAX_OUTPUT_BYTES


class OutputTooLarge(LiveError):
    """A Slurm command printed more than its cap (`output_cap`): it was stopped."""


def _run_capped(args: list[str], env: dict[str, str], timeout: float,
                cap: int) -> tuple[int, str, str]:
    """(exit status, stdout, the last lines of stderr) of `args`, reading at most `cap` bytes of
    stdout: a command that prints more, or outlives `timeout`, is killed with its process group
    (`OutputTooLarge`, `subprocess.TimeoutExpired`), so the agent's memory stays bounded."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        try:
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(args, timeout)
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = key.data
                    buf += chunk
                    if buf is err and len(err) > _MAX_STDERR_BYTES:
                        del err[:len(err) - _MAX_STDERR_BYTES]  # its last lines say why
                    if buf is out and len(out) > cap:
                        raise OutputTooLarge(
                            f"`{' '.join(args)}` printed more than {cap:,} bytes, more than it "
                            "prints on any cluster autosched can tune; stopped it")
            code = proc.wait(max(0.0, deadline - time.monotonic()))
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            proc.stdout.close()
            proc.stderr.close()
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL `proc` and whatever it started (its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _entry(key: str, value: str | None) -> str:
    """A SchedulerParameters entry as written: ``bf_continue`` or ``bf_window=1440``."""
    return key if value is None else f"{key}={value}"


def slurm_stamp(t: float) -> str:
    """A unix time as sacct's -S/-E take it, in UTC (the runner sets TZ=UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def add_queue_rows(sacct: str, squeue: str) -> str:
    """`sacct` text plus, as sacct rows, the queued jobs (``squeue -o SQUEUE_FORMAT``) it does
    not list yet: pending ones with their requested GPUs (ReqTRES), running ones with them
    allocated."""
    lines = sacct.splitlines()
    if not lines:
        lines = ["|".join(SACCT_FIELDS)]
    header = lines[0].split("|")
    have = {line.split("|", 1)[0] for line in lines[1:]}
    out = list(lines)
    for line in squeue.splitlines():
        cells = line.split("|")
        if len(cells) != 10 or cells[0] in have:
            continue
        job, submit, start, gres, user, account, part, state, cpus, limit = cells
        gpus = node_gpus(",".join(g.replace("gres:", "").replace("gres/", "")
                                  for g in gres.split(",")))
        tres = f"cpu={cpus},gres/gpu={gpus}" if gpus else f"cpu={cpus}"
        running = state not in ("PENDING", "REQUEUED", "REQUEUE_HOLD")
        row = {"JobID": job, "Submit": submit, "Start": start if running else "Unknown",
               "End": "Unknown", "AllocTRES": tres if running else "", "ReqTRES": tres,
               "User": user, "Account": account, "Partition": part, "State": state,
               "NCPUS": cpus, "Timelimit": limit}
        out.append("|".join(row.get(h, "") for h in header))
    return "\n".join(out) + "\n"


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config`` as name -> text (the first block; names as printed)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if not sep or " " in name.strip() or not name.strip():
            continue
        out.setdefault(name.strip(), value.strip())
    return out


def split_scheduler_parameters(text: str) -> list[tuple[str, str | None]]:
    """``bf_window=1440,bf_continue`` -> [("bf_window", "1440"), ("bf_continue", None)]."""
    if text.strip().lower() in ("", "(null)"):
        return []
    out = []
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if key:
            out.append((key, value if sep else None))
    return out


def live_settings(config: dict[str, str]) -> dict[str, str]:
    """The allowlisted settings of a parsed ``scontrol show config``, bf_* entries flattened
    (a flag gets ``""``)."""
    out = {canonical(k): v for k, v in config.items() if is_allowed(k) and
           not k.startswith(BACKFILL_PREFIX)}
    for key, value in split_scheduler_parameters(config.get("SchedulerParameters", "")):
        if key.startswith(BACKFILL_PREFIX):
            out[key] = value if value is not None else ""
    return out


def parse_nodes(text: str) -> list[dict[str, str]]:
    """``scontrol show node -o`` (one node per line; also ``show partition -o``) as a list of
    key -> value (a value runs to the next space: ``TRESBillingWeights=CPU=1.0,GRES/gpu=4.0``)."""
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields: dict[str, str] = {m[1]: m[2] for m in re.finditer(r"(\w+)=(\S*)", line)}
        nodes.append(fields)
    return nodes


def node_gpus(gres: str) -> int:
    """GPUs in a node's Gres (``gpu:8``, ``gpu:a100:4(S:0-1)``, ``gpu:2,mps:100``)."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def setup_from_slurm(config: dict[str, str], nodes: list[dict[str, str]],
                     partitions: list[dict[str, str]], assoc: str, qos: str) -> ClusterSetup:
    """The twin's `ClusterSetup` from what Slurm's commands print: the parsed ``scontrol show
    config``, ``scontrol show node -o`` and ``scontrol -a -o show partition`` records, and the
    text of ``sacctmgr -P show assoc format=Account,User,ParentName,Share`` and ``sacctmgr -P show
    qos format=Name,Priority``. Nodes without GPUs and partitions without GPU nodes are left out
    (a note says so for a partition); a partition without TRESBillingWeights bills CPUs
    (``CPU=1``), as Slurm does. An association tree the twin cannot model (``fairshare=parent``)
    is left out with a note."""
    gpu_nodes = [(n.get("NodeName", "?"), node_gpus(n.get("Gres", "")),
                  {p for p in n.get("Partitions", "").split(",") if p}) for n in nodes]
    gpu_nodes = [g for g in gpu_nodes if g[1] > 0]
    if not gpu_nodes:
        raise LiveError("scontrol show node: no node has GPUs (Gres=gpu:N)")
    notes: list[str] = []
    parts = []
    for rec in partitions:
        name = rec.get("PartitionName", "")
        members = tuple(n for n, _, ps in gpu_nodes if name in ps)
        if not name:
            continue
        if not members:
            notes.append(f"partition {name} has no GPU nodes: left out of the twin")
            continue
        where = f"scontrol show partition {name}: TRESBillingWeights"
        try:
            billing = parse_billing_weights(rec.get("TRESBillingWeights", ""), where) or (("CPU", 1.0),)
        except ClusterError as e:
            notes.append(f"{e}; the twin bills its jobs' CPUs, as Slurm does without weights")
            billing = (("CPU", 1.0),)
        if (note := billed_tres_note(name, billing)) is not None:
            notes.append(note)
        parts.append(PartitionSetup(name, members, _int(rec.get("PriorityTier"), 1), billing,
                                    _int(rec.get("PriorityJobFactor"), 1),
                                    rec.get("Default", "").upper() == "YES"))
    try:
        associations = parse_associations([r.split("|") for r in assoc.splitlines() if r.strip()],
                                          "sacctmgr show assoc")
    except InputError as e:
        associations = ()
        notes.append(f"association tree not modelled ({e}); fair share over the history's "
                     "accounts and users with equal shares")
    qos_rows = [r.split("|") for r in qos.splitlines()[1:] if r.strip()]
    weights = tuple((k, _int(config.get(k) or config.get(k.replace("QOS", "Qos")), 0))
                    for k in ("PriorityWeightQOS", "PriorityWeightPartition", "PriorityWeightAssoc"))
    flags = tuple(f.strip() for f in config.get("PriorityFlags", "").split(",")
                  if f.strip() and f.strip().lower() != "(null)")
    shapes = [n for n in nodes if node_gpus(n.get("Gres", "")) > 0]
    defaults = job_defaults(config.get("JobDefaults", ""))
    default_part = next((rec for rec in partitions if rec.get("Default", "").upper() == "YES"), None)
    if default_part is not None:  # a partition's own JobDefaults override slurm.conf's for its jobs
        defaults = {**defaults, **job_defaults(default_part.get("JobDefaults", ""))}
    return ClusterSetup(nodes=tuple((n, g) for n, g, _ in gpu_nodes), partitions=tuple(parts),
                        associations=associations, priority_flags=flags,
                        qos=tuple((r[0].strip(), _int(r[1] if len(r) > 1 else "", 0))
                                  for r in qos_rows if r[0].strip()),
                        weights=weights, notes=tuple(notes),
                        source=f"slurm cluster {config.get('ClusterName', '')}".strip(),
                        cpus=_most(_int(n.get("CPUTot"), 0) for n in shapes),
                        memory=_most(_int(n.get("RealMemory"), 0) for n in shapes),
                        def_cpu_per_gpu=defaults.get("DefCpuPerGPU"),
                        def_mem_per_gpu=defaults.get("DefMemPerGPU"))


def job_defaults(text: str) -> dict[str, float]:
    """``JobDefaults`` as ``scontrol show config`` (and ``show partition``) print it,
    ``DefCpuPerGPU=2,DefMemPerGPU=300`` (``(null)``: none), as numbers by name; a pair that is
    not NAME=number is left out."""
    out = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        try:
            if sep:
                out[name.strip()] = float(value)
        except ValueError:
            continue
    return out


def _most(values: Any) -> int:
    """The most common of `values` (0 when there are none)."""
    counts = Counter(values)
    return counts.most_common(1)[0][0] if counts else 0


def _int(text: str | None, default: int) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        return default


def include_problem(slurm_conf: Path | None, include: Path) -> str | None:
    """None if `slurm_conf` has an ``Include`` of `include` as its last setting line (comments
    and blank lines may follow), else what is wrong and what to do: without the line nothing the
    agent writes takes effect, and a setting after it would override the agent's. A slurm.conf
    that is not a regular UTF-8 text file is an `InputError` naming it."""
    advice = "then run `scontrol reconfigure`"
    if slurm_conf is None:
        return "SLURM_CONF is not set and no slurm.conf path was given"
    text = read_text_input(slurm_conf, "slurm.conf", MAX_SLURM_CONF_BYTES)
    target = os.path.realpath(include)
    found = None  # line number of our Include
    last = None  # line number and text of the last setting line
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#")[0].split()
        if not words:
            continue
        last = (number, line.strip())
        if len(words) == 2 and words[0].lower() == "include":
            path = words[1] if os.path.isabs(words[1]) else str(slurm_conf.parent / words[1])
            if os.path.realpath(path) == target:
                found = number
    if found is None:
        return (f"{slurm_conf} has no line `Include {include}`: add it as the last line of slurm.conf, "
                f"{advice}")
    if last is not None and last[0] != found:
        return (f"{slurm_conf}: line {last[0]} (`{last[1]}`) comes after `Include {include}` "
                f"(line {found}) and would override the agent's settings; make the Include line the "
                f"last setting line of slurm.conf, {advice}")
    return None


class SlurmConnector:
    """A Slurm cluster through ``sacct``/``scontrol``; writes only `include` (see module doc)."""

    kind = "slurm"

    def __init__(self, include: str | Path, slurm_conf: str | Path | None = None,
                 runner: SlurmRunner | None = None):
        self.include = Path(include)
        self.slurm_conf = Path(slurm_conf) if slurm_conf else (
            Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
        self.runner = runner or SlurmRunner(str(self.slurm_conf) if self.slurm_conf else None)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "include": str(self.include),
                "slurm_conf": str(self.slurm_conf) if self.slurm_conf else None}

    def check_include_line(self) -> str | None:
        """None if slurm.conf ends with an ``Include`` of our file, else what is wrong
        (`include_problem`)."""
        return include_problem(self.slurm_conf, self.include)

    # -- reading --------------------------------------------------------------------------
    def now(self) -> float:
        return time.time()

    def sacct_rows(self, since: float, until: float) -> str:
        text = self.runner.run(["sacct", "-a", "--parsable2", "--duplicates",
                                "--format=" + ",".join(SACCT_FIELDS),
                                "-S", slurm_stamp(since), "-E", slurm_stamp(until)])
        # sacct lists a pending job only once it is eligible (not one held by --begin), and
        # slurmdbd records jobs with a delay: the queue itself comes from slurmctld
        return add_queue_rows(text, self.runner.run(["squeue", "-h", "-a", "-o", SQUEUE_FORMAT]))

    def setup(self) -> ClusterSetup:
        config = self.show_config()
        nodes = parse_nodes(self.runner.run(["scontrol", "show", "node", "-o"]))
        # -a: hidden partitions too (their jobs are in the history)
        partitions = parse_nodes(self.runner.run(["scontrol", "-a", "-o", "show", "partition"]))
        cluster = config.get("ClusterName", "")
        assoc = self.runner.run(["sacctmgr", "-P", "show", "assoc",
                                 *(["where", f"cluster={cluster}"] if cluster else []),
                                 "format=Account,User,ParentName,Share"])
        qos = self.runner.run(["sacctmgr", "-P", "show", "qos", "format=Name,Priority"])
        return setup_from_slurm(config, nodes, partitions, assoc, qos)

    def show_config(self) -> dict[str, str]:
        return parse_show_config(self.runner.run(["scontrol", "show", "config"]))

    def backfill_stats(self) -> BackfillStats:
        return parse_sdiag(self.runner.run(["sdiag"]))

    def live_values(self) -> dict[str, str]:
        return live_settings(self.show_config())

    def snapshot(self) -> dict[str, Any]:
        return include_snapshot(self.include)

    # -- writing --------------------------------------------------------------------------
    def render(self, settings: dict[str, str], header: str = "") -> str:
        """The include file for `settings`. bf_* entries are merged into the live
        SchedulerParameters (entries autosched does not manage stay as they are)."""
        lines = ["# Managed by autosched: every change is a revision in its store; edit through",
                 "# `autosched agent` (a hand edit here blocks the agent until it is adopted)."]
        lines += [f"# {h}" for h in header.splitlines() if h]
        bf = {k: v for k, v in settings.items() if k.startswith(BACKFILL_PREFIX)}
        bf_line = bool(bf) or self._managed_bf_in_file()
        kept = self._unmanaged_lines(settings, bf_line)
        if kept:
            lines.append("# kept as they were in this file (not managed by autosched):")
            lines += kept
        for name, value in settings.items():
            if not name.startswith(BACKFILL_PREFIX):
                if not is_allowed(name):
                    raise LiveError(f"{name} is not a setting autosched may write")
                lines.append(f"{name}={value}")
        if bf_line:
            # the include's line replaces slurm.conf's whole: it carries slurm.conf's own entries
            # as they are now (not as Slurm runs them: those may be an older write of this file),
            # and the entries an operator had put in this file's own line
            own, ours = self._scheduler_entries(bf)
            items = [_entry(k, v) for k, v in own + ours]
            items += [k if v == "" else f"{k}={v}" for k, v in bf.items()]
            if ours:
                lines.append(f"{_KEPT_MARK} {','.join(k for k, _ in ours)}")
            # what was copied, as copied: an entry of the line that differs from it later was
            # set in this file by hand, and is kept
            lines.append(f"{_COPIED_MARK} {','.join(_entry(k, v) for k, v in own)}")
            lines.append(f"{_BF_MARK} {','.join(bf)}")
            lines.append("SchedulerParameters=" + ",".join(items))
        return "\n".join(lines) + "\n"

    def _unmanaged_lines(self, settings: dict[str, str], bf_managed: bool) -> list[str]:
        """Setting lines already in the include file that autosched does not manage: rewriting
        the file must not change them (Slurm would fall back to slurm.conf's values)."""
        try:
            text = self.include.read_text() if self.include.exists() else ""
        except OSError as e:
            raise LiveError(f"{self.include}: cannot read: {e.strerror}") from None
        managed = {k.lower() for k in settings}
        out = []
        for line in text.splitlines():
            key = line.split("=", 1)[0].strip()
            if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
                continue
            if key.lower() in managed:
                continue
            if key == "SchedulerParameters" and bf_managed:
                continue  # rebuilt from the live value below
            out.append(line)
        return out

    def _managed_bf_in_file(self) -> bool:
        return bool(self._file_bf_keys())

    def _own_entries(self, managed: Mapping[str, str]) -> list[tuple[str, str | None]]:
        """The SchedulerParameters entries that `managed` does not set, as the include's line must
        carry them: slurm.conf's own, then those kept from the include file itself."""
        own, kept = self._scheduler_entries(managed)
        return own + kept

    def _scheduler_entries(self, managed: Mapping[str, str]
                           ) -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
        """(slurm.conf's own SchedulerParameters entries that `managed` does not set, the include
        file's own entries that neither sets). The include's are those it carried before autosched
        first wrote its line (then every entry not managed), or those named as kept since: an
        entry copied from slurm.conf is not kept once slurm.conf drops it."""
        text = {k.lower(): v for k, v in self._own().items()}.get("schedulerparameters", "")
        own = [(k, v) for k, v in split_scheduler_parameters(text) if k not in managed]
        entries, first, hand = self._file_kept_entries()
        if first:
            self._check_no_conflict(dict(own), entries)
        # an entry set in this file by hand wins over slurm.conf's (Slurm runs it: the file's
        # line shadows slurm.conf's); one kept from before the agent's first write does not
        taken = set(managed) | ({k for k, _ in own} - hand)
        kept = [(k, v) for k, v in entries if k not in taken]
        own = [(k, v) for k, v in own if k not in hand]
        return own, kept

    def _check_no_conflict(self, own: Mapping[str, str | None],
                           entries: list[tuple[str, str | None]]) -> None:
        """Before the agent's first write, Slurm runs the include file's own line, which shadows
        slurm.conf's whole; the agent's line carries slurm.conf's entries. An entry the two set
        to different values would change silently: refused, naming both."""
        clash = [f"{k}={v} (slurm.conf: {k}={own[k]})" for k, v in entries
                 if k in own and own[k] != v]
        if clash:
            raise LiveError(f"{self.include}: its SchedulerParameters line, which Slurm runs, "
                            f"sets {', '.join(clash)}; the agent's line would carry slurm.conf's "
                            "value. Remove the entry from one of the two files")

    def _file_kept_entries(self) -> tuple[list[tuple[str, str | None]], bool, set[str]]:
        """The include file's own SchedulerParameters entries to keep, whether they are its
        line as an operator wrote it (the agent has not written the file yet), and the names of
        those set in the file by hand since the agent wrote it (an entry it did not write, or
        wrote otherwise: neither managed nor copied from slurm.conf as the copy mark says)."""
        try:
            text = self.include.read_text() if self.include.exists() else ""
        except OSError as e:
            raise LiveError(f"{self.include}: cannot read: {e.strerror}") from None
        names: set[str] | None = None  # None: autosched has not written the line yet
        managed: set[str] = set()
        copied: dict[str, str | None] | None = None  # None: written before the copy mark
        entries: list[tuple[str, str | None]] = []
        for line in text.splitlines():
            if line.startswith(_KEPT_MARK):
                names = {k for k in line[len(_KEPT_MARK):].strip().split(",") if k}
            elif line.startswith(_COPIED_MARK):
                copied = dict(split_scheduler_parameters(line[len(_COPIED_MARK):]))
            elif line.startswith(_BF_MARK):
                managed = {k for k in line[len(_BF_MARK):].strip().split(",") if k}
                names = set() if names is None else names
            elif line.split("=", 1)[0].strip().lower() == "schedulerparameters":
                entries = split_scheduler_parameters(line.split("=", 1)[1])
        if names is None:
            return entries, True, set()
        hand = set() if copied is None else {
            k for k, v in entries if k not in names and k not in managed
            and (k not in copied or copied[k] != v)}
        return [(k, v) for k, v in entries if k in names or k in hand], False, hand

    def _own(self) -> dict[str, str]:
        return own_settings(self.slurm_conf, self.include) if self.slurm_conf else {}

    def own_settings(self) -> dict[str, str]:
        return live_settings(self._own())

    def refresh(self, settings: dict[str, str], header: str = "") -> list[str]:
        if not {k for k in settings if k.startswith(BACKFILL_PREFIX)} \
                and not self._managed_bf_in_file():
            return []  # the include file writes no SchedulerParameters: slurm.conf's applies
        bf = {k: v for k, v in settings.items() if k.startswith(BACKFILL_PREFIX)}
        want = self._own_entries(bf)
        live = [(k, v) for k, v in split_scheduler_parameters(
            self.show_config().get("SchedulerParameters", "")) if k not in bf]
        if sorted(want, key=str) == sorted(live, key=str):
            return []
        self.apply(settings, header)

        def shown(items: list[tuple[str, str | None]]) -> str:
            return ",".join(k if v is None else f"{k}={v}" for k, v in items) or "none"

        return [f"SchedulerParameters: slurm.conf's own entries ({shown(want)}) written into "
                f"{self.include}, which shadows slurm.conf's line (Slurm ran {shown(live)})"]

    def _file_bf_keys(self) -> set[str]:
        """The SchedulerParameters entries the last write managed (named in a comment line, so
        that entries copied from the live value are not mistaken for managed ones)."""
        try:
            text = self.include.read_text() if self.include.exists() else ""
        except OSError:
            return set()
        for line in text.splitlines():
            if line.startswith(_BF_MARK):
                return {k for k in line[len(_BF_MARK):].strip().split(",") if k}
        return set()

    def preview(self, settings: dict[str, str], header: str = "") -> IncludeChange:
        return include_change(self.include, self.render(settings, header))

    def apply(self, settings: dict[str, str], header: str = "") -> None:
        before = self.snapshot()
        text = self.render(settings, header)
        self._write(text)
        try:
            self.runner.run(["scontrol", "reconfigure"], read=False)
            live = self.live_values()
            wrong = [f"{k}={live.get(k)!s} (wanted {v!r})" for k, v in settings.items()
                     if not same_value(k, live.get(k), v)]
            if wrong:
                raise ApplyFailed("after `scontrol reconfigure`, slurmctld holds "
                                  + ", ".join(wrong))
        except LiveError as e:
            raise undo_apply(lambda: self.restore(before), e, self.include) from None

    def restore(self, snapshot: dict[str, Any]) -> None:
        old = snapshot.get("include")
        if old is None:
            # an absent file would break slurm.conf's Include line; an empty one makes every
            # Slurm command warn, so write a comment only
            old = "# Managed by autosched: no managed settings yet.\n"
        self._write(old)
        try:
            self.runner.run(["scontrol", "reconfigure"], read=False)
        except LiveError as e:  # the file is back; say that only Slurm has not re-read it
            raise type(e)(f"{self.include} is back as it was, but Slurm has not re-read it: "
                          f"{e}") from None

    def _write(self, text: str) -> None:
        try:
            write_text_atomic(self.include, text)
        except OutputError as e:  # it names the file and why already
            raise LiveError(str(e)) from None
        except OSError as e:
            raise LiveError(f"{self.include}: cannot write: {e.strerror or e}") from None
