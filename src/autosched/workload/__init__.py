"""Generative models of a cluster's workload: fit on its history, sample its next period.

    from autosched.workload import get_model, load_model
    model = get_model("stat")().fit(history)        # constructor kwargs are the model's params
    week = model.sample(start, 7 * 86400, seed=0)   # a Trace of jobs submitted in [start, start+7d)
    model.save("m.npz"); same = load_model("m.npz")

``MODELS`` maps a name to its class: ``replay`` (the baseline), ``stat`` (statistical, fits in
seconds), ``hybrid`` (last period's bursts replayed, their number set by ``stat``'s count model)
and ``neural`` (a GRU over the job sequence; needs ``pip install autosched[neural]``).
"""

from __future__ import annotations

import os

from .base import WorkloadError, WorkloadModel, read_model_file
from .hybrid import Hybrid
from .neural import Neural
from .replay import Replay
from .stat import Stat

MODELS: dict[str, type[WorkloadModel]] = {cls.name: cls for cls in (Replay, Stat, Hybrid, Neural)}


def get_model(name: str) -> type[WorkloadModel]:
    try:
        return MODELS[name]
    except KeyError:
        raise WorkloadError(f"unknown workload model {name!r}; known: {', '.join(MODELS)}") from None


def parse_model_spec(spec: str) -> WorkloadModel:
    """``name`` or ``name:param=value:param=value`` (as typed after ``--models``) -> a model."""
    name, *assignments = [s.strip() for s in spec.split(":")]
    cls = get_model(name)
    return cls(**dict(cls.space.parse_assignments(assignments)))


def load_model(path: str | os.PathLike) -> WorkloadModel:
    """A fitted model from a file written by ``WorkloadModel.save``."""
    header, arrays = read_model_file(path)
    cls = get_model(header["model"])
    try:
        return cls.load(header, arrays)
    except WorkloadError as e:
        raise WorkloadError(f"{path}: {e}") from None


__all__ = ["MODELS", "WorkloadModel", "WorkloadError", "get_model", "load_model", "parse_model_spec",
           "Replay", "Stat", "Hybrid", "Neural"]
