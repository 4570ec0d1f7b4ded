"""Causal knob screening: which knobs can move the objective at all?

After an initial design, the tuner learns a causal graph over the knobs, intermediate metrics
(queueing delay, utilisation, preemptions, fragmentation) and the objective with the PC algorithm
(causal-learn, Fisher-z test) under background knowledge in tiers: knobs → intermediates →
objective; nothing causes a knob, and knobs do not cause each other (they were set independently).
A knob with no path to the objective (each edge directed forward or undirected) and no marginal
dependence on it (see `_depends`: knobs are randomised, so that is a total causal effect) is
frozen at its value in the best trial so far; the search goes on over the others.

Encoding. Every column gets a rank-Gaussian (nonparanormal) transform before the Fisher-z test,
because metrics such as JCT are heavy-tailed and the test assumes roughly Gaussian data. Log-scale
knobs are ranked like any other. Bool knobs are 0/1. A categorical knob with k choices is one-hot
encoded with k-1 columns (the default choice is the reference level); the knob has a path to the
objective if any of its columns has. Constant columns (a knob never varied, no preemptions at
all) are left out of the graph; a knob left out is kept in the search, never frozen.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import norm, rankdata

from ..space import Bool, Categorical, ConfigSpace

DEFAULT_ALPHA = 0.2  # small designs: keeping a useless knob costs a little, freezing a useful one costs a lot
MIN_SAMPLES = 8
MAX_CONDITIONING = 3  # Fisher-z needs n - |S| - 3 > 0; small designs cannot afford large sets


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    directed: bool  # False: PC could not orient it (source—target)

    def __str__(self) -> str:
        return f"{self.source} {'->' if self.directed else '--'} {self.target}"


@dataclass
class Screening:
    """The learned graph, each knob's estimated effect, and the verdict."""

    knobs: list[str]
    intermediates: list[str]
    objective: str
    edges: list[Edge]
    effects: dict[str, float]  # standardised regression coefficient on the objective
    relevant: list[str]  # knobs with a path to the objective, or not testable
    frozen: dict[str, Any]  # knob -> value it is frozen at
    samples: int
    alpha: float
    note: str = ""
    untestable: list[str] = field(default_factory=list)
    unfrozen_at: int | None = None  # trials done when a stalled reduced search gave the knobs back
    # "causal": the graph above; "probes": one trial per knob, moved at the best config so far
    # (a structured space's secondary knobs; `effects` are then relative changes of the objective
    # and `alpha` the change below which a knob is frozen)
    method: str = "causal"

    def to_dict(self) -> dict[str, Any]:
        return {"knobs": self.knobs, "intermediates": self.intermediates, "objective": self.objective,
                "edges": [[e.source, e.target, e.directed] for e in self.edges],
                "effects": self.effects, "relevant": self.relevant, "frozen": self.frozen,
                "samples": self.samples, "alpha": self.alpha, "note": self.note,
                "untestable": self.untestable, "unfrozen_at": self.unfrozen_at, "method": self.method}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Screening":
        d = dict(d)
        d["edges"] = [Edge(s, t, bool(x)) for s, t, x in d["edges"]]
        return cls(**d)

    def text(self) -> str:
        if self.method == "probes":
            lines = [f"probes of {len(self.knobs)} secondary knobs after {self.samples} trials (frozen if the "
                     f"objective moved by under {self.alpha:.1%})"]
        else:
            lines = [f"causal screening on {self.samples} trials (PC, Fisher-z, alpha={self.alpha:g})"]
            lines += [f"  {e}" for e in self.edges] or ["  (no edges)"]
        for k in self.knobs:
            tag = "searched" if k in self.relevant else f"frozen at {self.frozen.get(k)!r}"
            lines.append(f"  {k}: effect {self.effects.get(k, float('nan')):+.3f}, {tag}")
        if self.note:
            lines.append(f"  note: {self.note}")
        if self.unfrozen_at is not None:
            lines.append(f"  the reduced search stalled: all knobs searched again from trial {self.unfrozen_at}")
        return "\n".join(lines)


def gaussian_ranks(x: np.ndarray) -> np.ndarray:
    """Map a column to normal scores of its ranks (ties share a rank)."""
    r = rankdata(x)
    scores: np.ndarray = norm.ppf((r - 0.5) / len(x))  # (scipy has no type information)
    return scores


def encode_knobs(space: ConfigSpace, configs: Sequence[Mapping[str, Any]],
                 knobs: Sequence[str]) -> tuple[np.ndarray, list[str], list[str]]:
    """Columns for the knobs: (matrix, column names, knob of each column)."""
    cols, names, owner = [], [], []
    for name in knobs:
        knob = space[name]
        values = [c[name] for c in configs]
        if isinstance(knob, Categorical):
            for choice in knob.choices:
                if choice == knob.default:
                    continue  # reference level
                cols.append([1.0 if v == choice else 0.0 for v in values])
                names.append(f"{name}={choice}")
                owner.append(name)
        else:
            cols.append([float(v) if not isinstance(knob, Bool) else float(bool(v)) for v in values])
            names.append(name)
            owner.append(name)
    return np.asarray(cols, dtype=float).T.reshape(len(configs), len(cols)), names, owner


def screen(space: ConfigSpace, configs: Sequence[Mapping[str, Any]], intermediates: Mapping[str, Sequence[float]],
           objective: Sequence[float], objective_name: str, best_config: Mapping[str, Any],
           knobs: Sequence[str] | None = None, alpha: float = DEFAULT_ALPHA) -> Screening:
    """Learn the graph on the completed trials and decide which knobs to freeze.

    `configs`, each list in `intermediates`, and `objective` are aligned (one entry per trial)."""
    knobs = list(knobs if knobs is not None else space.names)
    n = len(configs)
    X, xnames, owner = encode_knobs(space, configs, knobs)
    inter_names = [k for k, v in intermediates.items() if k != objective_name]
    M = np.asarray([intermediates[k] for k in inter_names], dtype=float).T.reshape(n, len(inter_names))
    y = np.asarray(objective, dtype=float).reshape(n, 1)

    keep_x = [i for i in range(X.shape[1]) if np.ptp(X[:, i]) > 0]
    keep_m = [i for i in range(M.shape[1]) if np.ptp(M[:, i]) > 0 and np.all(np.isfinite(M[:, i]))]
    keep_m, duplicates = _drop_duplicates(M, keep_m, [y[:, 0]] + [X[:, i] for i in keep_x])
    cols = [xnames[i] for i in keep_x] + [inter_names[i] for i in keep_m] + [objective_name]
    data = np.column_stack([X[:, keep_x], M[:, keep_m], y])
    tested = {owner[i] for i in keep_x}
    untestable = [k for k in knobs if k not in tested]
    effects = _effects(data[:, : len(keep_x)], y[:, 0], [owner[i] for i in keep_x], knobs)

    note = ""
    if duplicates:
        note = (f"left out {', '.join(inter_names[i] for i in duplicates)}: same ranking as the objective, a knob or "
                "another intermediate (e.g. avg_queue and avg_jct differ by a near-constant run time)")
    if np.ptp(y) == 0 or len(keep_x) == 0 or n < MIN_SAMPLES:
        note = _join(note, "too few varied trials for a causal graph; no knob frozen")
        return Screening(knobs, [inter_names[i] for i in keep_m], objective_name, [], effects,
                         list(knobs), {}, n, alpha, note, untestable)
    try:
        edges = _pc_edges(data, cols, len(keep_x), len(keep_m), alpha)
    except (np.linalg.LinAlgError, ValueError) as e:
        note = _join(note, f"the causal graph could not be learned ({e}); no knob frozen")
        return Screening(knobs, [inter_names[i] for i in keep_m], objective_name, [], effects,
                         list(knobs), {}, n, alpha, note, untestable)

    reach = _reaches(edges, objective_name)
    col_owner = {xnames[i]: owner[i] for i in keep_x}
    # Knobs are randomised (set independently of everything), so nothing confounds a knob and the
    # objective: a marginal dependence *is* a total causal effect. PC's conditional tests can cut
    # such a knob off when an intermediate is a near-deterministic function of it (faithfulness
    # fails: conditioning on either one hides the other), so a marginal dependence keeps it too.
    marginal = {xnames[i] for j, i in enumerate(keep_x) if _depends(data[:, j], y[:, 0], alpha)}
    relevant_set = {col_owner[c] for c in col_owner if c in reach or c in marginal} | set(untestable)
    relevant = [k for k in knobs if k in relevant_set]
    if not relevant:
        # Nothing reaches the objective: keep the knob with the largest estimated effect so the rest
        # of the budget still explores something.
        top = max(knobs, key=lambda k: abs(effects.get(k, 0.0)))
        relevant = [top]
        note = _join(note, f"no knob has a path to {objective_name}; kept the one with the largest effect ({top})")
    frozen = {k: best_config[k] for k in knobs if k not in relevant}
    # Edges are reported per knob, not per one-hot column.
    named = [Edge(col_owner.get(e.source, e.source), e.target, e.directed) for e in edges]
    named = list(dict.fromkeys(named))
    return Screening(knobs, [inter_names[i] for i in keep_m], objective_name, named, effects,
                     relevant, frozen, n, alpha, note, untestable)


def _drop_duplicates(M: np.ndarray, keep: list[int], others: list[np.ndarray],
                     limit: float = 0.995) -> tuple[list[int], list[int]]:
    """An intermediate whose rank-Gaussian column is (almost) that of the objective, of a knob, or
    of an earlier intermediate is the same variable in another unit: it makes the correlation
    matrix singular, and a deterministic pair breaks PC's faithfulness assumption (conditioning on
    one makes the other independent of everything). Keep the first of such a group."""
    kept, dropped = [], []
    ref = [gaussian_ranks(o) for o in others]
    for i in keep:
        z = gaussian_ranks(M[:, i])
        if any(abs(np.corrcoef(z, r)[0, 1]) > limit for r in ref):
            dropped.append(i)
        else:
            kept.append(i)
            ref.append(z)
    return kept, dropped


def _pc_edges(data: np.ndarray, cols: list[str], n_knob_cols: int, n_inter: int, alpha: float) -> list[Edge]:
    from causallearn.graph.GraphNode import GraphNode
    from causallearn.search.ConstraintBased.PC import pc
    from causallearn.utils.PCUtils.BackgroundKnowledge import BackgroundKnowledge

    z = np.column_stack([gaussian_ranks(data[:, i]) for i in range(data.shape[1])])
    nodes = [GraphNode(c) for c in cols]
    bk = BackgroundKnowledge()
    knob_nodes = nodes[:n_knob_cols]
    for node in knob_nodes:
        bk.add_node_to_tier(node, 0)
    for node in nodes[n_knob_cols:n_knob_cols + n_inter]:
        bk.add_node_to_tier(node, 1)
    bk.add_node_to_tier(nodes[-1], 2)
    bk.forbid_within_tier(0)  # knobs are set independently: no knob causes another
    max_k = max(0, min(MAX_CONDITIONING, len(z) - 5))
    with warnings.catch_warnings():  # "features much larger than sample size": small designs are the point
        warnings.simplefilter("ignore", UserWarning)
        cg = pc(z, alpha=alpha, indep_test="fisherz", background_knowledge=bk, show_progress=False,
                node_names=cols, max_k=max_k)
    g = cg.G.graph
    edges = []
    for i in range(len(cols)):
        for j in range(i + 1, len(cols)):
            if g[i, j] == 0 and g[j, i] == 0:
                continue
            if g[j, i] == 1 and g[i, j] == -1:
                edges.append(Edge(cols[i], cols[j], True))
            elif g[i, j] == 1 and g[j, i] == -1:
                edges.append(Edge(cols[j], cols[i], True))
            else:  # undirected (or bidirected): list it in tier order
                edges.append(Edge(cols[i], cols[j], False))
    return edges


def _depends(x: np.ndarray, y: np.ndarray, alpha: float) -> bool:
    """Marginal Fisher-z test on rank-Gaussian scores, of the knob and of its centred square (so a
    knob whose best value is mid-range is seen too); Bonferroni over the two, so a useless knob is
    kept with probability about alpha."""
    zx, zy = gaussian_ranks(x), gaussian_ranks(y)
    n = len(zy)
    for col in (zx, zx * zx - np.mean(zx * zx)):
        if np.ptp(col) == 0:
            continue
        r = float(np.clip(np.corrcoef(col, zy)[0, 1], -0.999999, 0.999999))
        stat = abs(np.arctanh(r)) * math.sqrt(max(n - 3, 1))
        if 2 * norm.sf(stat) < alpha / 2:
            return True
    return False


def _reaches(edges: Sequence[Edge], target: str) -> set[str]:
    """Nodes with a path to `target` along directed (forward) or undirected edges."""
    back: dict[str, set[str]] = {}
    for e in edges:
        back.setdefault(e.target, set()).add(e.source)
        if not e.directed:
            back.setdefault(e.source, set()).add(e.target)
    seen, stack = {target}, [target]
    while stack:
        for u in back.get(stack.pop(), ()):
            if u not in seen:
                seen.add(u)
                stack.append(u)
    seen.discard(target)
    return seen


def _effects(X: np.ndarray, y: np.ndarray, owner: list[str], knobs: Sequence[str]) -> dict[str, float]:
    """Standardised least-squares coefficient of each knob column on the (rank-Gaussian) objective;
    for a one-hot knob, the coefficient of largest magnitude. Knobs never varied get 0."""
    out = {k: 0.0 for k in knobs}
    if X.shape[1] == 0 or np.ptp(y) == 0 or len(y) < 3:
        return out
    Z = (X - X.mean(0)) / X.std(0)
    t = gaussian_ranks(y)
    t = (t - t.mean()) / t.std()
    coef, *_ = np.linalg.lstsq(np.column_stack([Z, np.ones(len(t))]), t, rcond=None)
    for c, k in zip(coef[:-1], owner):
        if abs(c) > abs(out[k]):
            out[k] = float(c)
    return {k: (0.0 if math.isnan(v) else v) for k, v in out.items()}


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b
