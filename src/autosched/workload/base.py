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
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from ..atomic import atomic_path, check_input
from ..errors import InputError
from ..space import ConfigSpace
from ..trace.report import MAX_SUBMIT_TIME
from ..trace.table import Trace

FORMAT_VERSION = 1
# Bounds on what one sample may generate, so that a typo (--horizon 100000d) fails at once instead
# of filling the machine's memory: a year of the busiest public trace is a few million jobs.
MAX_HORIZON = 366 * 86400.0
MAX_SAMPLE_JOBS = 10_000_000
# Per-job columns a sampled job takes from the history job it copies (a model that copies
# history jobs says which: `Jobs.source`): what a scheduler knows of a job besides its size and
# run time - whose it is (fair share), its partition and its time limit (Slurm's backfill plans
# with it). A model that does not copy jobs (neural) samples none of them.
CARRIED = ("user", "account", "partition", "time_limit", "num_cpus")
_TEXT_CARRIED = ("user", "account", "partition")


class WorkloadError(InputError):
    """Bad input to a workload model: empty history, horizon <= 0, unknown model, bad model file."""


class WorkloadModel:
    """Base class. Subclasses declare ``name``, ``summary``, ``space`` and implement
    ``_fit``, ``_sample``, ``_state`` and ``_restore``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    space: ClassVar[ConfigSpace] = ConfigSpace([])
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

    def fit(self, history: Trace, start: float | None = None, end: float | None = None) -> "WorkloadModel":
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
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez_compressed(f, __header__=np.array(json.dumps(header)), **arrays)

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
            start, end, jobs = header["history"]
            model.history_start, model.history_end = float(start), float(end)
            model.history_jobs = int(float(jobs))
            model.vc_names = header.get("vc_names")
            model.carried = {str(c): arrays[f"carried.{c}"].astype(object) if c in _TEXT_CARRIED
                             else arrays[f"carried.{c}"] for c in header.get("carried") or []
                             if c in CARRIED}
            model._restore(header["state"], arrays)
        except WorkloadError:  # (a ValueError too) from a model held inside this one: already said
            raise
        except (KeyError, ValueError, TypeError, IndexError) as e:  # a file edited or cut by hand
            raise WorkloadError(f"damaged model file ({type(e).__name__}: {e})") from None
        model.fitted = True
        return model

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
        check_jobs(cols)
        return Trace.from_columns(cols, source=prefix)


def check_jobs(cols: dict[str, np.ndarray]) -> None:
    """The rules every generated trace keeps; a breach is a bug in a model, so it is loud."""
    if not np.all(cols["num_gpus"] >= 1):
        raise AssertionError("generated a job with no GPUs")
    if not np.all(np.isfinite(cols["duration"]) & (cols["duration"] > 0)):
        raise AssertionError("generated a job with a duration that is not positive and finite")


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
