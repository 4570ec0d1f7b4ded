"""The study file: checking it, holding it for one run, and knowing what problem it is for.

A study file is an SQLite database that Optuna's RDB storage keeps. Three rules:

- **What it is.** A directory, a file that is not SQLite, an SQLite database of something else
  (tables, but not Optuna's) or a path that cannot be written is refused with a one-line
  `StudyError` before Optuna touches it.
- **One run at a time.** A run holds an exclusive `flock` on the study file itself (its PID in
  ``REALPATH.lock``) for as long as it uses the study; a second run, through the same name, a
  symbolic link or a hard link, is refused at once with "in use by PID N". The kernel drops the
  lock when the holder dies (even by SIGKILL), so a killed run never leaves the study locked.
  Holding the lock is also what makes it safe for the next run to mark the trials a killed run
  left RUNNING as interrupted.
- **What it is for.** `problem_identity` describes the problem (policies and their knob spaces,
  cluster, objective, and a content hash of every workload); it is stored in the study, and a run
  with a different problem is refused, so a study never answers for a trace it did not see.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..cluster import ClusterSpec
from ..policies import Policy, policy_identity
from ..space import Float, Int, Knob
from ..trace.table import Trace
from .config import TuneError
from .objective import Objective

SQLITE_MAGIC = b"SQLite format 3\x00"
OPTUNA_TABLES = frozenset({"studies", "version_info", "alembic_version"})


class StudyError(TuneError):
    """A study file that cannot be used: not a study, not writable, in use, or for another problem."""


def check_study_path(path: Path) -> None:
    """Refuse a path that cannot be a study file (a directory, a device, a FIFO); create missing
    parent folders. Before taking the lock: the lock file goes beside the study."""
    if path.is_dir():
        raise StudyError(f"study {path}: is a directory; a study is one SQLite file")
    if path.exists() and not path.is_file():
        raise StudyError(f"study {path}: not a regular file; a study is one SQLite file")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StudyError(f"study {path}: cannot create its folder {parent} ({e.strerror})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StudyError(f"study {path}: cannot write in its folder {parent} (permission denied)")


def check_study_file(path: Path) -> None:
    """Refuse an existing file that is not a study (not SQLite, or another program's database)
    or cannot be written. Under the lock: no other run is creating the file meanwhile."""
    if path.exists():
        try:
            with path.open("rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise StudyError(f"study {path}: cannot be read ({e.strerror})") from None
        if head and head != SQLITE_MAGIC:
            raise StudyError(f"study {path}: not an SQLite file (a study file that tuning wrote); "
                             "it is left as it is")
        if head:
            tables = _tables(path)
            if tables and not tables & OPTUNA_TABLES:
                raise StudyError(f"study {path}: an SQLite database of something else (tables "
                                 f"{', '.join(sorted(tables)[:4])}), not a study; it is left as it is")
        if not os.access(path, os.R_OK | os.W_OK):
            raise StudyError(f"study {path}: cannot be written (permission denied)")


def _tables(path: Path) -> set[str]:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.Error as e:
        raise StudyError(f"study {path}: cannot be read as SQLite ({e})") from None


_HELD: set[int] = set()  # descriptors of the locks this process holds


def _drop_in_child() -> None:
    # A forked trial worker shares the parent's lock; if it kept its copy, a worker outliving a
    # killed parent would keep the study locked. Closing the child's copy leaves the parent's.
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_in_child)


class StudyLock:
    """An exclusive, non-blocking `flock` on the study file itself for the life of one run.

    The lock is on the file, not on the path as typed: a second run through a symbolic link or a
    hard link to the same study is refused as one through the same name (a lock file beside the
    path would be another file for each name). The file is created empty if it does not exist
    (SQLite takes an empty file as a new database; one left empty by a run that stopped before
    writing is removed again). ``REALPATH.lock`` holds the holder's PID, for the refusal message,
    and is removed on release. The kernel drops the lock when the holder dies (even by SIGKILL);
    forked children (the trial workers) do not keep it. SQLite's own locks are of another kind
    (POSIX record locks), so the two do not meet.

    Use as a context manager. A storage failure while the study is held (the disk fills up, an
    I/O error) leaves the block as one `StudyError` naming the study: what was stored is intact
    and a new run resumes it."""

    def __init__(self, study: Path):
        self.study = study
        self.path = Path(os.path.realpath(study) + ".lock")
        self._fd: int | None = None
        self._created = False

    def __enter__(self) -> "StudyLock":
        import fcntl

        existed = os.path.lexists(self.study)
        try:
            fd = os.open(self.study, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError as e:
            raise StudyError(f"study {self.study}: cannot create or open it ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StudyError(f"study {self.study} is in use by {self._holder()} (another tuning run); "
                             "wait for it to finish, or use another study file") from None
        self._fd, self._created = fd, not existed
        _HELD.add(fd)
        try:
            self.path.write_text(f"{os.getpid()}\n")
        except OSError:
            pass  # the PID only names the holder in a refusal; the lock holds without it
        return self

    def _holder(self) -> str:
        for _ in range(10):  # the holder writes its PID right after locking
            try:
                text = self.path.read_text().strip()
            except OSError:
                text = ""
            if text.isdigit():
                return f"PID {text}"
            time.sleep(0.05)
        return "another process"

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._fd is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            if self._created and os.path.exists(self.study) and os.path.getsize(self.study) == 0:
                os.unlink(self.study)  # (still locked: no other run uses it meanwhile)
            _HELD.discard(self._fd)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        if exc is not None and _storage_failure(exc):
            raise StudyError(f"study {self.study}: writing to the study failed ({_root_cause(exc)}); what it "
                             "stored is kept, and a new run resumes it") from None


def _storage_failure(exc: BaseException) -> bool:
    """An error of the study's storage (SQLite through Optuna and SQLAlchemy): a full disk, an
    I/O error, a database locked past its timeout."""
    import optuna
    import sqlalchemy.exc

    return isinstance(exc, (optuna.exceptions.StorageInternalError, sqlalchemy.exc.OperationalError,
                            sqlite3.OperationalError))


def _root_cause(exc: BaseException) -> str:
    """SQLite's own words (``database or disk is full``): Optuna's message for a failed commit
    guesses at "invalid data"."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    if isinstance(exc, sqlite3.Error) or not str(exc).strip():
        return str(exc).strip() or type(exc).__name__
    return str(exc).strip().splitlines()[0][:200]


# ------------------------------------------------------------------------------ identity

def trace_digest(trace: Trace) -> str:
    """SHA-256 of a trace's content: every present column's name, type and values (not its
    `source` label: the same jobs under another file name are the same workload)."""
    h = hashlib.sha256()
    for name, arr in trace.columns().items():
        h.update(f"{name}:{arr.dtype.kind}:{len(arr)};".encode())
        if arr.dtype.kind in "OUS":
            h.update("\x1f".join(map(str, arr.tolist())).encode("utf-8", "surrogatepass"))
        else:
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _space_digest(policy: type[Policy]) -> str:
    space = policy.space
    lines = [_knob_text(k) for k in space]
    if space.structured:  # how the space is searched changes what a search finds
        lines.append(repr((space.weights, space.weight_scale, sorted(space.archetypes.items()),
                           space.secondary)))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _knob_text(knob: Knob) -> str:
    """A knob as its dataclass repr read when studies were first stored: `unit` last and only on
    `Float` and `Int`, `search` only when set. Moving `unit` up to `Knob` reordered every repr,
    and `search` came later; a study (and an oracle cache entry, keyed by the same identity) must
    not read as a changed space when no knob did."""
    names = [f.name for f in dataclasses.fields(knob) if f.repr and f.name not in ("unit", "search")]
    if isinstance(knob, (Float, Int)):
        names.append("unit")
        if knob.search is not None:
            names.append("search")
    return f"{type(knob).__qualname__}({', '.join(f'{n}={getattr(knob, n)!r}' for n in names)})"


# Cluster fields added after studies were first stored: part of a study's identity only when
# set, so that a study stored before them opens again.
_IF_SET = ("associations", "clocks", "slurm_partitions", "node_cpus", "def_cpu_per_gpu")


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def problem_identity(policies: Sequence[type[Policy]], cluster: ClusterSpec, objective: Objective,
                     workloads: Sequence[Trace]) -> dict[str, Any]:
    """What a study is for, as JSON: compared part by part when a study is opened again."""
    cluster_fields = {f.name: getattr(cluster, f.name) for f in dataclasses.fields(cluster)
                      if f.compare and not (f.name in _IF_SET and getattr(cluster, f.name) == f.default)}
    identity = {
        "policies": [p.name for p in policies],
        "spaces": {p.name: _space_digest(p) for p in policies},
        "cluster": {"describe": cluster.describe(),
                    **{k: _plain(v) for k, v in cluster_fields.items()}},
        "objective": objective.to_dict(),
        "workloads": [{"jobs": len(w), "sha256": trace_digest(w)} for w in workloads],
    }
    # a plugin is also its module and class: two plugins may share a name (built-in policies
    # keep the identity studies were first stored with)
    plugins = [policy_identity(p) for p in policies if policy_identity(p) != p.name]
    if plugins:
        identity["classes"] = plugins
    return identity


_PART_NAMES = {"policies": "policies", "classes": "policy classes", "spaces": "knob spaces", "cluster": "cluster",
               "objective": "objective", "workloads": "workloads", "subspace": "the part of the knob space searched"}


def check_identity(study: Path | None, stored: dict[str, Any], problem: dict[str, Any]) -> None:
    """Raise `StudyError` naming what differs between a study's problem and this run's."""
    import json

    norm = json.loads(json.dumps(problem))  # tuples -> lists, as stored
    if stored == norm:
        return
    where = f"study {study}" if study else "the study"
    if "workloads" not in stored:
        raise StudyError(f"{where} was made by an older autosched that did not record its workloads; "
                         "it cannot be checked, so it is not reused: use a new study file")
    parts = [k for k in _PART_NAMES if stored.get(k) != norm.get(k)]
    detail = []
    for k in parts:
        if k == "workloads":
            a, b = stored[k], norm[k]
            detail.append(f"workloads: {_describe_workloads(a)} in the study, {_describe_workloads(b)} now")
        elif k == "spaces":
            detail.append("knob spaces: a policy's knobs changed since the study was made")
        elif k == "cluster":
            detail.append(f"cluster: {stored[k].get('describe')} in the study, {norm[k].get('describe')} now"
                          if stored[k].get("describe") != norm[k].get("describe")
                          else "cluster: its properties (restart overhead, ...) differ")
        else:
            detail.append(f"{_PART_NAMES[k]}: {json.dumps(stored.get(k))} in the study, {json.dumps(norm.get(k))} now")
    raise StudyError(f"{where} was made for another problem ({'; '.join(detail)}); its results do not "
                     "apply: use a new study file or another study name")


def _describe_workloads(items: list[dict[str, Any]]) -> str:
    return ", ".join(f"{w['jobs']} jobs sha256 {w['sha256'][:12]}" for w in items) or "none"
