"""A disk cache of tuning outcomes, for the oracles' large searches.

The oracles are tuned with many times a round's budget (they must be the best a search can do,
not another noisy strategy); that is the slow part of an experiment, and its result depends only
on the problem. So each search's outcome is stored under a key of everything it depends on: the
policy and its knob space, the cluster, the objective, the workloads' content (a trace digest:
the real future of one period, or the whole trace, with the carried-over backlog), the search
settings (budget, seed, sampler, screening, ...), the warm start and the autosched version. A re-run
reads the stored best config instead of searching again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..atomic import write_text_atomic
from ..cluster import ClusterSpec
from ..jsonable import jsonable
from ..policies import Policy, get_policy
from ..sim.metrics import Metrics
from ..space import Config
from ..trace.table import Trace
from ..tune import ExecutionConfig, Objective, SearchConfig
from .controller import RoundTuner, TunerFactory, policy_class

if TYPE_CHECKING:
    from ..tune import TrialCheck

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/autosched/tuning (default ~/.cache/autosched/tuning)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autosched" / "tuning"


@dataclass
class CachedOutcome:
    """A stored search: keeps to `autosched.adapt.controller.TuningOutcome` (no trials: the
    controller scores the configs it compares again, which costs two simulations)."""

    best_config: Config | None
    cost: dict[str, float]
    graph: list[tuple[str, str, bool]] = field(default_factory=list)
    screened_knobs: dict[str, Any] = field(default_factory=dict)
    trials: list = field(default_factory=list)
    cached: bool = True


class CachedTuner:
    """A `RoundTuner` whose searches are read from `directory` when the same search was done before."""

    def __init__(self, inner: RoundTuner, key_parts: Mapping[str, Any], directory: Path,
                 policy: type[Policy] | None = None):
        self.inner = inner
        self.key_parts = dict(key_parts)
        self.directory = Path(directory)
        self.policy = policy or get_policy(self.key_parts["policy"])  # its knob space is in the key
        self.hits = 0

    def key(self, workloads: Sequence[Trace], warm_start: Sequence[Mapping[str, Any]] | None) -> str:
        from ..tune import problem_identity

        ident = {**self.key_parts, "format": CACHE_FORMAT, "version": __version__,
                 "problem": problem_identity([self.policy], self.key_parts["cluster"],
                                             self.key_parts["objective"], workloads),
                 "warm_start": [dict(sorted(dict(c).items())) for c in (warm_start or [])]}
        ident.pop("cluster")
        ident.pop("objective")
        text = json.dumps(ident, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def tune(self, workloads: Sequence[Trace], warm_start: Sequence[Mapping[str, Any]] | None = None,
             progress: Callable[[int, int], None] | None = None,
             prior: Sequence[Sequence[Any]] | None = None, check: TrialCheck | None = None) -> Any:
        # earlier rounds' trials, or a check, change the search; not part of the key: search afresh
        if prior or check is not None:
            return self.inner.tune(workloads, warm_start, progress, prior, check)
        path = self.directory / f"{self.key(workloads, warm_start)}.json"
        got = self._read(path)
        if got is not None:
            self.hits += 1
            return got
        res = self.inner.tune(workloads, warm_start, progress)
        out = {"best_config": res.best_config, "cost": dict(res.cost),
               "graph": [list(e) for e in res.graph], "screened_knobs": dict(res.screened_knobs)}
        self.directory.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(jsonable(out)))
        return res

    def _read(self, path: Path) -> CachedOutcome | None:
        """The outcome stored at `path`; None when there is none yet, or what is there is not an
        outcome of this search (not JSON, a field missing or of another type, a config the
        policy's space refuses): the search is then done again and its outcome stored over it."""
        try:
            d = json.loads(path.read_bytes())
            best, cost, graph, screened = (d["best_config"], d["cost"], d["graph"],
                                           d["screened_knobs"])
            if best is not None:
                if not isinstance(best, dict):
                    return None
                best = self.policy.space.validate(best)
            if not (isinstance(cost, dict) and isinstance(screened, dict)
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                            for v in cost.values())
                    and isinstance(graph, list)
                    and all(isinstance(e, list) and len(e) == 3 for e in graph)):
                return None
            return CachedOutcome(best, cost, [tuple(e) for e in graph], screened)
        except (OSError, ValueError, KeyError, TypeError):  # ConfigError is a ValueError
            return None

    def evaluate(self, policy_name: str, config: Mapping[str, Any],
                 workloads: Sequence[Trace]) -> tuple[float, list[Metrics]]:
        return self.inner.evaluate(policy_name, config, workloads)


def cached_factory(inner: TunerFactory, directory: Path | None,
                   extra: Mapping[str, Any] | None = None) -> TunerFactory:
    """`inner`, with its searches cached in `directory` (None: no cache); `extra`: more of what
    the outcome depends on, beyond the search's problem and settings (the key's other parts)."""
    if directory is None:
        return inner

    def make(policy: str | type[Policy], cluster: ClusterSpec, objective: Objective, search: SearchConfig,
             execution: ExecutionConfig) -> RoundTuner:
        cls = policy_class(policy)
        settings = asdict(search)  # budget, seed, sampler, screening, design, patience, subspace
        if search.subspace is None:  # the key of a search of the whole space, as before subspaces
            del settings["subspace"]
        parts = {"policy": cls.name, "cluster": cluster, "objective": objective, "search": settings, **(extra or {})}
        return CachedTuner(inner(policy, cluster, objective, search, execution), parts, directory, cls)

    return make
