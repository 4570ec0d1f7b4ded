"""What a workload model is: fit on a cluster's history, then sample its next period.

A model's parameters are declared once, as a `ConfigSpace` (the same typed knobs policies use),
and validated there. ``fit`` sees only the history it is given; ``sample`` returns a valid
`Trace` of jobs submitted in ``[start, start + horizon)``. ``save`` and ``load`` (through
``load_model``) round-trip a fitted model through one ``.npz`` file (arrays plus a JSON header;
no pickle, so a model file cannot run code when loaded).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from ..atomic import atomic_path, check_input
from ..errors import InputError
from ..space import ConfigSpace
from ..timeparse import MAX_LENGTH
from ..trace.report import MAX_CPUS, MAX_DURATION, MAX_GPUS, MAX_SUBMIT_TIME, MAX_TIME_LIMIT
from ..trace.table import Trace

FORMAT_VERSION = 1
# Bounds on what one sample may generate, so that a typo (--horizon 100000d) fails at once instead
# of filling the machine's memory: a year of the busiest public trace is a few million jobs.
MAX_HORIZON = MAX_LENGTH
MAX_SAMPLE_JOBS = 10_000_000
# Per-job columns a sampled job takes from the history job it copies (a model that copies
# history jobs says which: `Jobs.source`): what a scheduler knows of a job besides its size and
# run time - whose it is (fair share), its partition and its time limit (Slurm's backfill plans
# with it). A model that does not copy jobs (neural) samples none of them.
CARRIED = ("user", "account", "partition", "time_limit", "num_cpus")


@dataclass(frozen=True)
class Saved:
    """What the values of an array a model saves must be (`WorkloadModel.saved`): finite
    numbers in ``[low, high]`` (``(low, high]`` with `above_low`), whole with `integer`, of
    `ndim` dimensions (None: any); with `nan`, NaN too (it stands for "none", as a job's time
    limit); with `text`, text rather than numbers (names: only their type is checked).
    `WorkloadModel.load` checks every declared array, so that a model file edited by hand (NaN,
    zero or negative GPUs, 1e300-second durations) is refused with one line instead of failing
    deep inside a sample or writing values past the trace bounds into it."""

    what: str  # plural: "GPU counts"
    low: float = -math.inf
    high: float = math.inf
    integer: bool = False
    above_low: bool = False
    ndim: int | None = 1
    nan: bool = False
    text: bool = False

    def check(self, name: str, a: np.ndarray) -> None:
        if a.dtype.kind not in ("U" if self.text else "biuf"):
            raise WorkloadError(f"array {name!r} holds {a.dtype} values, not {'text' if self.text else 'numbers'}")
        if self.ndim is not None and a.ndim != self.ndim:
            raise WorkloadError(f"array {name!r} has {a.ndim} dimension(s), not {self.ndim}")
        if self.text:
            return
        x = a.astype(np.float64, copy=False).ravel()
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(x) & (x <= self.high) & ((x > self.low) if self.above_low else (x >= self.low))
            if self.integer:
                ok &= x == np.floor(x)
            if self.nan:
                ok |= np.isnan(x)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise WorkloadError(f"array {name!r} holds {float(x[i]):g} at index {i}; {self.rule()}")

    def rule(self) -> str:
        """``GPU counts are whole numbers in [1, 1,000,000]``, for messages."""
        if self.text:
            return f"{self.what} are text"
        lo = "(" if self.above_low else "["
        if math.isinf(self.low) and math.isinf(self.high):
            bounds = ""
        elif math.isinf(self.high):
            bounds = f" {'>' if self.above_low else '>='} {_num(self.low)}"
        else:
            bounds = f" in {lo}{_num(self.low)}, {_num(self.high)}]"
        return f"{self.what} are {'whole' if self.integer else 'finite'} numbers{bounds}" + \
            (", or NaN (none)" if self.nan else "")


def _num(x: float) -> str:
    return f"{x:,.0f}" if math.isfinite(x) else ("-inf" if x < 0 else "inf")


# The values the models keep, within the bounds the trace loaders apply to every row
GPUS = Saved("GPU counts", 1, MAX_GPUS, integer=True)
DURATIONS = Saved("durations (s)", 0.0, MAX_DURATION, above_low=True)
TIMES = Saved("times (s)", -MAX_SUBMIT_TIME, MAX_SUBMIT_TIME)
CODES = Saved("codes", 0, math.inf, integer=True)  # indices into another array (VC names, buckets)
NUMBERS = Saved("parameters", ndim=None)  # any finite numbers (coefficients, a network's weights)
# The `CARRIED` columns, as the trace loaders keep them (a time limit > 0, NaN for none); saved
# as ``carried.<column>``, one value per history job.
CARRIED_SAVED = {"user": Saved("user names", text=True), "account": Saved("account names", text=True),
                 "partition": Saved("partition names", text=True),
                 "time_limit": Saved("time limits (s)", 0.0, MAX_TIME_LIMIT, above_low=True, nan=True),
                 "num_cpus": Saved("CPU counts", 0, MAX_CPUS, integer=True)}
_TEXT_CARRIED = tuple(c for c, rule in CARRIED_SAVED.items() if rule.text)


class WorkloadError(InputError):
    """Bad input to a workload model: empty history, horizon <= 0, unknown model, bad model file."""


class WorkloadModel:
    """Base class. Subclasses declare ``name``, ``summary``, ``space`` and implement
    ``_fit``, ``_sample``, ``_state`` and ``_restore``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    space: ClassVar[ConfigSpace] = ConfigSpace([])
    # Each array `_state` saves and what its values must be; `load` checks them, then calls
    # `_check_state` for what relates one array to another.
    saved: ClassVar[dict[str, Saved]] = {}
    # True if sample() ignores the seed (one sample says everything; the evaluation runs one).
    deterministic: ClassVar[bool] = False

    def __init__(self, **params: Any):
        self.params: dict[str, Any] = self.space.validate(params)
        self.fitted = False
        self.history_start = 0.0
        self.history_end = 0.0
        self.history_jobs = 0
        self.vc_names: list[str] | None = None  # None: the history has no VC column
        # the history's `CARRIED` columns (in its row order) that sampled copies take along
        self.carried: dict[str, np.ndarray] = {}

    # ----------------------------------------------------------------------------- public API

    def fit(self, history: Trace, start: float | None = None, end: float | None = None) -> Self:
        """Learn the workload from `history` (and nothing after its last submission).

        ``start`` / ``end``: the window the history was cut from (default: its first and last
        submission). Give them when known: a 7-day window's first and last jobs are less than 7
        days apart, and a model that took that span for the window would see quiet edges as no
        time at all (replay would tile 6 days into 7, +17 % load)."""
        if len(history) == 0:
            raise WorkloadError(f"{self.name}: cannot fit on an empty history")
        lo = history.start if start is None else float(start)
        hi = history.end if end is None else float(end)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= history.start and hi >= history.end):
            raise WorkloadError(f"{self.name}: the history window [{lo:g}, {hi:g}] does not hold its jobs "
                                f"(submitted {history.start:g} to {history.end:g})")
        # A window stretched far past its jobs (``--until 3000000d`` on a 2-day trace) is only empty
        # time, and a model's cost grows with the window (stat counts every hour of it).
        quiet = max(history.start - lo, hi - history.end)
        if quiet > MAX_LENGTH:
            raise WorkloadError(f"{self.name}: the history window [{lo / 86400:,.6g}, {hi / 86400:,.6g}] days "
                                f"reaches {quiet / 86400:,.6g} days beyond its jobs (submitted {history.start / 86400:,.6g} "
                                f"to {history.end / 86400:,.6g} days); the limit is {MAX_LENGTH / 86400:g} days")
        self.history_start, self.history_end = lo, hi
        self.history_jobs = len(history)
        self.vc_names = sorted(set(history.vc.tolist())) if history.vc is not None else None
        self.carried = {c: getattr(history, c) for c in CARRIED if getattr(history, c) is not None}
        self._fit(history)
        self.fitted = True
        return self

    def sample(self, start: float, horizon: float, seed: int) -> Trace:
        """A workload of jobs submitted in ``[start, start + horizon)``, reproducible for a seed."""
        if not self.fitted:
            raise WorkloadError(f"{self.name}: call fit() before sample()")
        start, horizon = float(start), float(horizon)
        if not (math.isfinite(start) and start <= MAX_SUBMIT_TIME):
            raise WorkloadError(f"{self.name}: start {start:g} is beyond the bound on submit times "
                                f"({MAX_SUBMIT_TIME:,} s, 100 years)")
        if not (math.isfinite(horizon) and horizon > 0):
            raise WorkloadError(f"{self.name}: horizon must be > 0 seconds (got {horizon:g})")
        if horizon > MAX_HORIZON:
            raise WorkloadError(f"{self.name}: horizon of {horizon / 86400:,.6g} days is beyond the "
                                f"{MAX_HORIZON / 86400:g}-day limit of one sample; sample the period in parts")
        if start + horizon > MAX_SUBMIT_TIME:
            raise WorkloadError(f"{self.name}: the period [{start:g}, {start + horizon:g}) s ends beyond the bound "
                                f"on submit times ({MAX_SUBMIT_TIME:,} s, 100 years)")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise WorkloadError(f"{self.name}: seed must be an integer >= 0 (got {seed!r})")
        rng = np.random.default_rng(int(seed))
        jobs = self._sample(start, horizon, rng)
        return jobs.to_trace(start, horizon, f"{self.name}-{int(seed)}", self.carried)

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model to one ``.npz`` file, atomically."""
        if not self.fitted:
            raise WorkloadError(f"{self.name}: fit the model before saving it")
        meta, arrays = self._state()
        # text as fixed-width unicode: an object array would need pickle to load
        arrays = {**arrays, **{f"carried.{c}": a.astype(str) if c in _TEXT_CARRIED else a
                               for c, a in self.carried.items()}}
        header = {"format": FORMAT_VERSION, "model": self.name, "params": self.params,
                  "history": [self.history_start, self.history_end, self.history_jobs],
                  "vc_names": self.vc_names, "carried": list(self.carried), "state": meta}
        # allow_pickle=False: the reader refuses object arrays, so the writer must too.
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez_compressed(f, allow_pickle=False, __header__=np.array(json.dumps(header)), **arrays)

    @classmethod
    def load(cls, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> Self:
        """The fitted model that `save` wrote, from its file's header and arrays (as
        `read_model_file` returns them; ``load_model`` calls it once the header has named the
        class). A model that holds another fitted model (the hybrid's count model) calls it too,
        with a header of the same shape, so that what ``fit`` records besides the model's own
        state (the history's window, job count and VC names) is restored in this one place.
        A header or arrays that do not hold what the model saved raise `WorkloadError`."""
        try:
            model = cls(**header["params"])
            model._load_history(header)
            model._load_carried(header, arrays)
            model._restore(header["state"], arrays)
            for name, rule in cls.saved.items():
                if name in arrays:  # (a missing optional array, such as `vc`, was restored as None)
                    rule.check(name, arrays[name])
            model._check_state()
        except WorkloadError:  # (a ValueError too) a value out of its bounds, or said by a model held inside this one
            raise
        except (KeyError, ValueError, TypeError, IndexError, RuntimeError) as e:  # a file edited or cut by hand
            raise WorkloadError(f"damaged model file ({type(e).__name__}: {e})") from None
        model.fitted = True
        return model

    def _load_history(self, header: dict[str, Any]) -> None:
        """What `fit` recorded besides the model's state, checked: the history's window
        (finite, ordered, within the bounds on times), its job count and its VC names."""
        start, end, jobs = (float(x) for x in header["history"])
        if not (abs(start) <= MAX_SUBMIT_TIME and abs(end) <= MAX_SUBMIT_TIME and start <= end):
            raise WorkloadError(f"the history window [{start!r}, {end!r}] is not two ordered times within "
                                f"the bound ({MAX_SUBMIT_TIME:,} s)")
        if not (math.isfinite(jobs) and jobs >= 1 and jobs == math.floor(jobs)):
            raise WorkloadError(f"the history's job count {jobs!r} is not a whole number >= 1")
        names = header.get("vc_names")
        if names is not None and not (isinstance(names, list) and names and all(isinstance(v, str) for v in names)):
            raise WorkloadError("the VC names are not a list of text")
        self.history_start, self.history_end, self.history_jobs = start, end, int(jobs)
        self.vc_names = names

    def _load_carried(self, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """The `CARRIED` columns `fit` kept (none in a file saved before they were): each named in
        the header once, checked as `CARRIED_SAVED` says, one value per history job."""
        names = header.get("carried") or []
        if not (isinstance(names, list) and all(isinstance(c, str) and c in CARRIED for c in names)
                and len(set(names)) == len(names)):
            raise WorkloadError(f"the carried columns {names!r} are not distinct names among {', '.join(CARRIED)}")
        carried = {}
        for c in names:
            a = arrays[f"carried.{c}"]
            CARRIED_SAVED[c].check(f"carried.{c}", a)
            same_length(self.history_jobs, **{f"carried.{c}": a})
            carried[c] = a.astype(object) if c in _TEXT_CARRIED else a
        self.carried = carried

    def _check_source(self, name: str, source: np.ndarray | None, length: int) -> None:
        """The saved history row of each of `length` jobs a model copies (checked as `CODES`):
        one per job, each a row of the `carried` columns (they hold one value per history job)."""
        if source is not None:
            same_length(length, **{name: source})
            self._check_codes(name, source, self.history_jobs, "history jobs")

    def _check_state(self) -> None:
        """After `_restore` and the `saved` checks: what relates one array to another (lengths,
        codes that index another array). Raises `WorkloadError`; the default checks nothing."""

    def _check_times(self, name: str, t: np.ndarray) -> None:
        """Submit times `t` lie in the history's window (where `fit` saw them)."""
        out = np.flatnonzero((t < self.history_start) | (t > self.history_end))
        if len(out):
            raise WorkloadError(f"array {name!r} holds the time {float(t[out[0]]):g} at index {int(out[0])}, outside the "
                                f"history window [{self.history_start:g}, {self.history_end:g}]")

    def _check_codes(self, name: str, codes: np.ndarray | None, count: int, of: str) -> None:
        """`codes` (checked as `CODES`) each index one of `count` entries of `of`."""
        if codes is not None and len(codes) and int(codes.max()) >= count:
            raise WorkloadError(f"array {name!r} holds code {int(codes.max())}, but there are only {count} {of}")

    def _check_vc(self, name: str, codes: np.ndarray | None, length: int) -> None:
        """The saved VC codes: one per job (`length`), each naming one of `vc_names`, and
        present exactly when the history had VCs."""
        if (codes is None) != (self.vc_names is None):
            raise WorkloadError(f"array {name!r} and the VC names must be both present or both absent")
        if codes is not None:
            same_length(length, **{name: codes})
            self._check_codes(name, codes, len(self.vc_names or []), "VC names")

    def describe(self) -> str:
        """The model and its parameters in one line, e.g. ``stat(half_life=7)``."""
        knobs = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params.items())
        return f"{self.name}({knobs})"

    # ----------------------------------------------------------------------- for subclasses

    def _fit(self, history: Trace) -> None:
        raise NotImplementedError

    def _sample(self, start: float, horizon: float, rng: np.random.Generator) -> "Jobs":
        raise NotImplementedError

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        raise NotImplementedError

    def _restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        raise NotImplementedError


class Jobs:
    """Generated jobs as plain arrays (vc as codes into the model's ``vc_names``; ``source``, for
    a model that copies history jobs, the history row each one copies)."""

    def __init__(self, submit: np.ndarray, gpus: np.ndarray, duration: np.ndarray,
                 vc: np.ndarray | None, vc_names: list[str] | None,
                 source: np.ndarray | None = None):
        self.submit = np.asarray(submit, dtype=np.float64)
        self.gpus = np.asarray(gpus, dtype=np.int64)
        self.duration = np.asarray(duration, dtype=np.float64)
        self.vc = None if vc is None or vc_names is None else np.asarray(vc, dtype=np.int64)
        self.vc_names = vc_names
        self.source = None if source is None else np.asarray(source, dtype=np.int64)

    def to_trace(self, start: float, horizon: float, prefix: str,
                 carried: dict[str, np.ndarray] | None = None) -> Trace:
        """Keep the jobs in [start, start + horizon), sort them, and give them unique ids; with
        ``source``, each takes the `carried` columns of the history job it copies."""
        keep = (self.submit >= start) & (self.submit < start + horizon)
        order = np.flatnonzero(keep)[np.argsort(self.submit[keep], kind="stable")]
        n = len(order)
        cols: dict[str, Any] = {
            "job_id": np.array([f"{prefix}-{i}" for i in range(n)], dtype=object),
            "submit_time": self.submit[order],
            "num_gpus": self.gpus[order],
            "duration": self.duration[order],
        }
        if self.vc is not None:
            cols["vc"] = np.asarray(self.vc_names, dtype=object)[self.vc[order]] if n else np.array([], dtype=object)
        if self.source is not None:
            for c, a in (carried or {}).items():
                cols[c] = a[self.source[order]]
        check_jobs(cols, prefix)
        return Trace.from_columns(cols, source=prefix)


def check_jobs(cols: dict[str, np.ndarray], name: str) -> None:
    """Every sample keeps the bounds the trace loaders apply to every row (a sample written to a
    file reads back whole): GPUs in [1, MAX_GPUS], durations in (0, MAX_DURATION]. A model
    whose file passed `load`'s checks never breaks them; one built in code from values past
    them is refused here rather than writing them into its samples."""
    for col, rule in (("num_gpus", GPUS), ("duration", DURATIONS)):
        try:
            rule.check(col, cols[col])
        except WorkloadError as e:
            raise WorkloadError(f"{name}: a sampled job breaks the trace bounds ({e})") from None


def same_length(n: int, **arrays: np.ndarray) -> None:
    """Each of `arrays` (by name) holds `n` values (a model's `_check_state`)."""
    for name, a in arrays.items():
        if len(a) != n:
            raise WorkloadError(f"array {name!r} has {len(a)} values, not {n}")


def vc_codes(history: Trace, names: list[str] | None) -> np.ndarray | None:
    """Each job's VC as an index into `names` (sorted VC names of the history)."""
    if history.vc is None or names is None:
        return None
    return np.searchsorted(np.asarray(names, dtype=object), history.vc).astype(np.int64)


def check_sample_size(name: str, jobs: float) -> None:
    """Refuse, before generating them, more jobs than `MAX_SAMPLE_JOBS` (models call it as soon
    as they know how many they will make)."""
    if jobs > MAX_SAMPLE_JOBS:
        raise WorkloadError(f"{name}: the sample would have {jobs:,.0f} jobs, more than the limit of "
                            f"{MAX_SAMPLE_JOBS:,}; sample a shorter horizon")


_HEADER_KEYS = {"format": int, "model": str, "params": dict, "history": list, "state": dict}


def read_model_file(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON header and arrays of a model file, with one `WorkloadError` for anything that is
    not a complete model file written by autosched (a trace, a truncated or empty file...)."""
    path = Path(path)
    if not path.exists():
        raise WorkloadError(f"{path}: no such model file")
    if path.is_dir():
        raise WorkloadError(f"{path}: is a directory, not a model file")
    try:
        check_input(path, "model file (.npz)")
    except InputError as e:
        raise WorkloadError(str(e)) from None
    not_model = f"{path}: not a workload model file written by autosched `workload fit`"
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise WorkloadError(f"{path}: cannot read the model file ({e.strerror or e})") from None
    if not magic:
        raise WorkloadError(f"{path}: the file is empty; {not_model[len(str(path)) + 2:]}")
    if magic != b"PK\x03\x04":  # an .npz is a zip archive
        raise WorkloadError(f"{not_model} (it is not an .npz archive)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        header = json.loads(str(arrays.pop("__header__")))
    except Exception as e:  # zipfile, zlib, numpy and json raise many types for a cut or forged archive
        raise WorkloadError(f"{not_model}, or it is damaged ({type(e).__name__}: {e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        got = header.get("format") if isinstance(header, dict) else header
        raise WorkloadError(f"{path}: model file format {got!r} is not {FORMAT_VERSION}")
    bad = [k for k, t in _HEADER_KEYS.items() if not isinstance(header.get(k), t)]
    if bad or len(header["history"]) != 3:
        raise WorkloadError(f"{path}: damaged model header (field(s) {', '.join(bad) or 'history'})")
    return header, arrays
