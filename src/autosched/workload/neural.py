"""A learned sequence model of the job stream (in the spirit of Bergsma et al., SOSP '21).

Each job is four tokens: the inter-arrival time since the previous job (log-spaced bucket), its
GPU count (one of the sizes in the history), its duration (quantile bucket of the history's
durations) and its VC. A GRU reads the job sequence, with the time of day and of week of each
submission as extra inputs, and predicts the next job's tokens one after the other (inter-arrival,
then GPUs given it, then duration given both, then VC given all three), so attributes are drawn
jointly. Sampling warms the GRU up on the end of the history, then generates forward from the last
submission (so a period that starts before the history's end is only filled from that end on); a
duration is a random history duration from the sampled bucket, an inter-arrival is log-uniform
within its bucket.

PyTorch is an optional extra (``pip install autosched[neural]``), imported only when a neural
model is fitted or sampled; torch uses one thread (the machines this runs on are shared).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..space import ConfigSpace, Float, Int
from ..trace.table import Trace
from .base import (
    CODES,
    DURATIONS,
    GPUS,
    NUMBERS,
    TIMES,
    Jobs,
    Saved,
    WorkloadError,
    WorkloadModel,
    check_sample_size,
    same_length,
    vc_codes,
)

DAY, WEEK = 86400.0, 604800.0
# Inter-arrival buckets: [0, 1) s, then doubling up to 2^20 s (12 days) and one open bucket.
IA_EDGES = np.concatenate([[0.0], 2.0 ** np.arange(0, 21)])


def _torch():
    try:
        import torch
    except ImportError:
        raise WorkloadError("the neural workload model needs PyTorch: pip install 'autosched[neural]'") from None
    torch.set_num_threads(1)
    return torch


class Neural(WorkloadModel):
    name = "neural"
    summary = "GRU over the job sequence predicting inter-arrival, GPUs, duration bucket and VC (needs torch)"
    space = ConfigSpace([
        Int("hidden", "GRU hidden units", low=8, high=512, default=48),
        Int("steps", "optimizer steps (each on `batch` random windows of `chunk` jobs)", low=1,
            high=100000, default=300),
        Int("batch", "windows per optimizer step", low=1, high=1024, default=16),
        Int("chunk", "training window length (jobs)", low=16, high=4096, default=64),
        Int("duration_buckets", "quantile buckets of duration", low=2, high=128, default=32),
        Float("lr", "Adam learning rate", low=1e-5, high=1.0, default=3e-3, log=True),
        Float("half_life", "loss weight halves for jobs this many days older (0 = equal weights)",
              low=0.0, high=1000.0, default=14.0, unit="days"),
        Int("warmup", "jobs at the end of history that set the GRU state before sampling", low=1,
            high=100000, default=512),
        Int("seed", "seed of the weight initialisation and training windows", low=0, high=2**31 - 1, default=0),
    ])

    # (d_edges ends in inf: `_check_state` checks it; the network's weights `_restore` does)
    saved = {"sizes": GPUS, "d_hist": DURATIONS, "d_hist_tok": CODES, "tail_tokens": Saved("tokens", 0, math.inf, integer=True, ndim=2),
             "tail_t": TIMES}

    # ------------------------------------------------------------------------- tokenising

    def _tokens(self, t: np.ndarray, g: np.ndarray, d: np.ndarray, vc: np.ndarray | None) -> np.ndarray:
        """(n, 4) int tokens: inter-arrival bucket (from the previous job), GPUs, duration, VC."""
        ia = np.diff(t, prepend=t[0])
        ia_tok = np.clip(np.searchsorted(IA_EDGES, ia, side="right") - 1, 0, len(IA_EDGES) - 1)
        g_tok = np.searchsorted(self.sizes, g)
        d_tok = np.clip(np.searchsorted(self.d_edges, d, side="right") - 1, 0, len(self.d_edges) - 2)
        v_tok = np.zeros(len(t), dtype=np.int64) if vc is None else vc
        return np.column_stack([ia_tok, g_tok, d_tok, v_tok]).astype(np.int64)

    def _vocab(self) -> tuple[int, int, int, int]:
        return len(IA_EDGES), len(self.sizes), len(self.d_edges) - 1, max(1, len(self.vc_names or []))

    # --------------------------------------------------------------------------------- fit

    def _fit(self, history: Trace) -> None:
        torch = _torch()
        p = self.params
        t, g, d = history.submit_time, history.num_gpus, history.duration
        vc = vc_codes(history, self.vc_names)
        self.sizes = np.unique(g)
        q = np.quantile(np.log(d), np.linspace(0, 1, p["duration_buckets"] + 1))
        self.d_edges = np.unique(np.exp(q))
        self.d_edges[0], self.d_edges[-1] = 0.0, np.inf
        if len(self.d_edges) < 2:
            self.d_edges = np.array([0.0, np.inf])
        tokens = self._tokens(t, g, d, vc)
        self.d_hist, self.d_hist_tok = d.copy(), tokens[:, 2].copy()
        torch.manual_seed(p["seed"])
        net = _make_net(self._vocab(), p["hidden"])
        feats = _time_features(t)
        age = (t[-1] - t) / DAY
        weight = 0.5 ** (age / p["half_life"]) if p["half_life"] > 0 else np.ones(len(t))
        _train(torch, net, tokens, feats, weight, p)
        self.net = net
        keep = slice(max(0, len(t) - p["warmup"]), len(t))
        self.tail_tokens, self.tail_t = tokens[keep].copy(), t[keep].copy()

    # ------------------------------------------------------------------------------ sample

    def _sample(self, start: float, horizon: float, rng: np.random.Generator) -> Jobs:
        torch = _torch()
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        net = self.net
        end = start + horizon
        # A cap on generated jobs, so a model that predicts ever shorter gaps still stops.
        rate = self.history_jobs / max(self.history_end - self.history_start, 1.0)
        # It generates from the end of its history, so a start far after it costs as much as a horizon.
        check_sample_size(self.name, rate * (end - self.tail_t[-1]))
        cap = int(10 * rate * (end - self.tail_t[-1])) + 10000
        out_t: list[float] = []
        out_tok: list[list[int]] = []
        with torch.no_grad():
            x = torch.as_tensor(self.tail_tokens)[None]
            f = torch.as_tensor(_time_features(self.tail_t), dtype=torch.float32)[None]
            hs, h = net.gru(net.embed(x, f))
            state = hs[0, -1]
            now = float(self.tail_t[-1])
            while now < end and len(out_t) < cap:
                tok = net.draw(state, gen)
                lo, hi = IA_EDGES[tok[0]], (IA_EDGES[tok[0] + 1] if tok[0] + 1 < len(IA_EDGES) else 2 * IA_EDGES[-1])
                now += lo + rng.random() * (hi - lo) if tok[0] == 0 else math.exp(rng.uniform(math.log(lo), math.log(hi)))
                out_t.append(now)
                out_tok.append(tok)
                xt = torch.as_tensor([tok])[None]
                ft = torch.as_tensor(_time_features(np.array([now])), dtype=torch.float32)[None]
                _, h = net.gru(net.embed(xt, ft), h)
                state = h[-1, 0]
        if not out_t:
            return Jobs(np.zeros(0), np.zeros(0), np.zeros(0), None, self.vc_names)
        toks = np.asarray(out_tok, dtype=np.int64)
        durations = self._durations(toks[:, 2], rng)
        vc = toks[:, 3] if self.vc_names is not None else None
        return Jobs(np.asarray(out_t), self.sizes[toks[:, 1]], durations, vc, self.vc_names)

    def _durations(self, buckets: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A random history duration from each sampled bucket."""
        order = np.argsort(self.d_hist_tok, kind="stable")
        sorted_tok = self.d_hist_tok[order]
        lo = np.searchsorted(sorted_tok, buckets, side="left")
        hi = np.searchsorted(sorted_tok, buckets, side="right")
        empty = hi <= lo  # a bucket with no history duration: fall back to any duration
        lo, hi = np.where(empty, 0, lo), np.where(empty, len(order), hi)
        pick = lo + (rng.random(len(buckets)) * (hi - lo)).astype(np.int64)
        return self.d_hist[order[np.minimum(pick, len(order) - 1)]]

    # -------------------------------------------------------------------------- save / load

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays = {"sizes": self.sizes, "d_edges": self.d_edges, "d_hist": self.d_hist,
                  "d_hist_tok": self.d_hist_tok, "tail_tokens": self.tail_tokens, "tail_t": self.tail_t}
        arrays.update({f"net.{k}": v.detach().cpu().numpy() for k, v in self.net.state_dict().items()})
        return {}, arrays

    def _restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        torch = _torch()
        for k in ("sizes", "d_edges", "d_hist", "d_hist_tok", "tail_tokens", "tail_t"):
            setattr(self, k, arrays[k])
        weights = {k: v for k, v in arrays.items() if k.startswith("net.")}
        for k, v in weights.items():
            NUMBERS.check(k, v)
        self.net = _make_net(self._vocab(), self.params["hidden"])
        self.net.load_state_dict({k[4:]: torch.as_tensor(v) for k, v in weights.items()})
        self.net.eval()

    def _check_state(self) -> None:
        e = self.d_edges
        if (e.ndim != 1 or len(e) < 2 or e[0] != 0.0 or e[-1] != np.inf or not np.isfinite(e[:-1]).all()
                or not np.all(np.diff(e) > 0)):
            raise WorkloadError("array 'd_edges' is not increasing bucket edges from 0 to inf")
        if len(self.sizes) < 1 or len(self.d_hist) < 1 or len(self.tail_t) < 1:
            raise WorkloadError("the model holds no job")
        same_length(len(self.d_hist), d_hist_tok=self.d_hist_tok)
        same_length(len(self.tail_t), tail_tokens=self.tail_tokens)
        self._check_times("tail_t", self.tail_t)
        if np.any(np.diff(self.tail_t) < 0):
            raise WorkloadError("array 'tail_t' is not in submit-time order")
        self._check_codes("d_hist_tok", self.d_hist_tok, len(e) - 1, "duration buckets")
        if self.tail_tokens.shape[1] != 4:
            raise WorkloadError(f"array 'tail_tokens' has {self.tail_tokens.shape[1]} columns, not 4")
        for k, (size, of) in enumerate(zip(self._vocab(), ("inter-arrival buckets", "GPU sizes", "duration buckets",
                                                            "VCs"))):
            self._check_codes(f"tail_tokens[:, {k}]", self.tail_tokens[:, k], size, of)


def _time_features(t: np.ndarray) -> np.ndarray:
    a, b = 2 * np.pi * (t % DAY) / DAY, 2 * np.pi * (t % WEEK) / WEEK
    return np.column_stack([np.sin(a), np.cos(a), np.sin(b), np.cos(b)]).astype(np.float32)


def _make_net(vocab: tuple[int, int, int, int], hidden: int):
    torch = _torch()
    from torch import nn  # a module, not a variable, so that mypy sees the base class
    emb = 16

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.ModuleList(nn.Embedding(v, emb) for v in vocab)
            self.gru = nn.GRU(4 * emb + 4, hidden, batch_first=True)
            # Head k predicts token k from the GRU state and the embeddings of tokens 0..k-1.
            self.heads = nn.ModuleList(nn.Sequential(nn.Linear(hidden + k * emb, hidden), nn.ReLU(),
                                                     nn.Linear(hidden, v)) for k, v in enumerate(vocab))

        def embed(self, x, f):
            return torch.cat([e(x[..., k]) for k, e in enumerate(self.emb)] + [f], dim=-1)

        def logits(self, state, target):
            """Teacher-forced logits of each token of `target` given `state`."""
            out, ctx = [], [state]
            for k, head in enumerate(self.heads):
                out.append(head(torch.cat(ctx, dim=-1)))
                ctx.append(self.emb[k](target[..., k]))
            return out

        def draw(self, state, gen) -> list[int]:
            ctx, tok = [state], []
            for k, head in enumerate(self.heads):
                probs = torch.softmax(head(torch.cat(ctx, dim=-1)), dim=-1)
                i = int(torch.multinomial(probs, 1, generator=gen))
                tok.append(i)
                ctx.append(self.emb[k](torch.tensor(i)))
            return tok

    return Net()


def _train(torch, net, tokens: np.ndarray, feats: np.ndarray, weight: np.ndarray, p: dict) -> None:
    """Next-job prediction, teacher forced, on windows of `chunk` jobs starting at random places
    (a fixed number of steps, so small and large histories both get a trained model)."""
    n = len(tokens)
    if n < 2:
        return
    L = min(p["chunk"], n - 1)
    x_all = torch.as_tensor(tokens)
    f_all = torch.as_tensor(feats)
    w_all = torch.as_tensor(weight, dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=p["lr"])
    rng = np.random.default_rng(p["seed"])
    loss_fn = torch.nn.CrossEntropyLoss(reduction="none")
    net.train()
    for _ in range(p["steps"]):
        idx = torch.as_tensor(rng.integers(0, n - L, p["batch"])[:, None] + np.arange(L)[None, :])
        x, f, y, w = x_all[idx], f_all[idx], x_all[idx + 1], w_all[idx + 1]
        hs, _ = net.gru(net.embed(x, f))
        loss = sum((loss_fn(lg.reshape(-1, lg.shape[-1]), y[..., k].reshape(-1)) * w.reshape(-1)).sum()
                   for k, lg in enumerate(net.logits(hs, y))) / w.sum().clamp_min(1e-9)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
