"""Slurm 22.05's fair-share factors over an association tree: Fair Tree (``fair_tree.c``) and
the classic factor (``priority_multifactor.c``), for the multifactor policy.

The tree is either the cluster's configured one (`autosched.associations`: every association
counts, submitted or not, as in slurmctld) or, without one, root -> account -> user built from
the trace, where only associations that have submitted count (equal shares).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..associations import ROOT, Association


@dataclass
class ShareTree:
    """Nodes 0..m-1 (0 is the root account); users are the leaves that carry usage.

    ``leaf[node]`` is the node's index into the per-association usage arrays (-1 for accounts);
    ``children`` lists each node's children in Slurm's order (configured: the listing's; derived:
    sorted by name); ``configured`` says whether every node counts always (a configured tree) or
    only once a leaf below it is active (the trace's tree)."""

    parent: list[int]
    is_user: list[bool]
    shares: list[float]
    leaf: list[int]
    children: list[list[int]]
    configured: bool
    node_of: dict[tuple[str, str], int] = field(default_factory=dict)  # (account, user) -> node
    _post: list[int] | None = None

    def __post_init__(self) -> None:
        # A trace's tree with one user per account (e.g. a trace without users), the i-th
        # account's user being leaf i (as from_pairs builds it): Fair Tree then needs no walk
        # (`_flat_fair_tree`).
        accts = self.children[0]
        flat = not self.configured and len(self.parent) == 1 + 2 * len(accts)
        for i, a in enumerate(accts):
            if not flat:
                break
            kids = self.children[a]
            flat = (not self.is_user[a] and len(kids) == 1 and self.is_user[kids[0]]
                    and self.leaf[kids[0]] == i)
        self._flat = flat

    @property
    def leaves(self) -> int:
        return sum(self.is_user)

    @classmethod
    def from_associations(cls, assocs: Sequence[Association]) -> "ShareTree":
        """The configured tree; leaves numbered in the listing's order of user associations.
        `assocs` must form one tree under root (`autosched.associations.check_tree`, which
        `ClusterSpec` runs on its associations)."""
        node = {(ROOT, ""): 0}
        parent, is_user, shares, leaf = [-1], [False], [1.0], [-1]
        root = next(a for a in assocs if a.account == ROOT and not a.user)
        shares[0] = float(root.shares)
        for a in assocs:  # accounts first: a user row may come before its account's parent row
            if not a.user and a.account != ROOT:
                node[(a.account, "")] = len(parent)
                parent.append(-2)
                is_user.append(False)
                shares.append(float(a.shares))
                leaf.append(-1)
        n_leaf = 0
        for a in assocs:
            if a.user:
                node[(a.account, a.user)] = len(parent)
                parent.append(node[(a.account, "")])
                is_user.append(True)
                shares.append(float(a.shares))
                leaf.append(n_leaf)
                n_leaf += 1
            elif a.account != ROOT:
                parent[node[(a.account, "")]] = node[(a.parent, "")]
        return cls._with_children(parent, is_user, shares, leaf, True, node)

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[int, int]]) -> "ShareTree":
        """The trace's tree: root -> account -> (account, user) leaf, equal shares; `pairs` sorted,
        leaf i is pairs[i]."""
        parent, is_user, shares, leaf = [-1], [False], [1.0], [-1]
        acct_node: dict[int, int] = {}
        for i, (a, _) in enumerate(pairs):
            if a not in acct_node:
                acct_node[a] = len(parent)
                parent.append(0)
                is_user.append(False)
                shares.append(1.0)
                leaf.append(-1)
            parent.append(acct_node[a])
            is_user.append(True)
            shares.append(1.0)
            leaf.append(i)
        return cls._with_children(parent, is_user, shares, leaf, False)

    @classmethod
    def _with_children(cls, parent: list[int], is_user: list[bool], shares: list[float],
                       leaf: list[int], configured: bool,
                       node_of: dict[tuple[str, str], int] | None = None) -> "ShareTree":
        children: list[list[int]] = [[] for _ in parent]
        for k, p in enumerate(parent):
            if p >= 0:
                children[p].append(k)
        # users before accounts among siblings (as slurmdbd lists them: root's user first)
        for c in children:
            c.sort(key=lambda k: not is_user[k])
        return cls(parent, is_user, shares, leaf, children, configured, node_of or {})

    # -------------------------------------------------------------------------- per node

    def _usage_and_active(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                          ) -> tuple[list[float], list[bool]]:
        """Usage of every node (its subtree's, as Slurm propagates usage up) and whether it
        counts."""
        m = len(self.parent)
        use = [0.0] * m
        act = [self.configured] * m
        act[0] = True
        order = self._post_order()
        used_l, known_l = used.tolist(), known.tolist()
        for k in order:
            lf = self.leaf[k]
            if lf >= 0:
                use[k] = used_l[lf]
                act[k] = act[k] or known_l[lf]
            p = self.parent[k]
            if p >= 0:
                use[p] += use[k]
                act[p] = act[p] or act[k]
        return use, act

    def _post_order(self) -> list[int]:
        if self._post is None:
            out, stack = [], [0]
            while stack:
                k = stack.pop()
                out.append(k)
                stack.extend(self.children[k])
            self._post = out[::-1]
        return self._post

    def _level_shares(self, act: list[bool]) -> list[float]:
        """Sum of the shares of each node's counted children (Slurm's level_shares)."""
        out = [0.0] * len(self.parent)
        for k, p in enumerate(self.parent):
            if p >= 0 and act[k]:
                out[p] += self.shares[k]
        return out

    # -------------------------------------------------------------------------- factors

    def fair_tree(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                  ) -> npt.NDArray[np.float64]:
        """Fair Tree factor of every leaf (22.05 ``fair_tree.c``).

        A node's level fair share is S / U with S its shares / its counted siblings' shares and
        U its usage / its parent's usage (no parent usage: U = 0, so infinite; S = 0 gives 0).
        Siblings are visited depth-first in descending level fair share (users before accounts on
        a tie; otherwise Slurm's tree order, as its stable sort keeps it); each user visited gets
        rank / (counted users), the rank starting at the number of counted users and going down
        by one per user, except that a user tied with the previous sibling keeps its rank, and
        the first child of an account tied with its previous sibling starts tied. (Slurm's
        ``_count_tied_accounts`` stops at the first account it meets, so tied accounts are not
        merged in 22.05, whatever its comments say.) Leaves that do not count get 1."""
        if self._flat:
            return self._flat_fair_tree(used, known)
        return self._walk_fair_tree(used, known)

    def _walk_fair_tree(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                        ) -> npt.NDArray[np.float64]:
        """`fair_tree` on any tree, by walking it."""
        out = np.ones(self.leaves)
        use, act = self._usage_and_active(used, known)
        n_users = sum(1 for k in range(len(act)) if act[k] and self.is_user[k])
        if n_users <= 1:
            return out
        level = self._level_shares(act)
        rank = rnt = n_users
        shares, parent, is_user, leaf, children = self.shares, self.parent, self.is_user, self.leaf, self.children

        def visit(sibs: list[int], tied_in: bool) -> None:
            nonlocal rank, rnt
            lfs = {}
            for s in sibs:
                p = parent[s]
                S = shares[s] / level[p] if level[p] > 0 else 0.0
                U = use[s] / use[p] if use[p] > 0 else 0.0
                lfs[s] = 0.0 if S == 0 else (S / U if U > 0 else math.inf)
            prev: float | None = None
            for i, a in enumerate(sorted(sibs, key=lambda s: (-lfs[s], not is_user[s]))):
                tied = tied_in if i == 0 else prev == lfs[a]
                if is_user[a]:
                    if not tied:
                        rank = rnt
                    out[leaf[a]] = rank / n_users
                    rnt -= 1
                else:
                    visit([c for c in children[a] if act[c]], tied)
                prev = lfs[a]

        visit([c for c in children[0] if act[c]], False)
        return out

    def _flat_fair_tree(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                        ) -> npt.NDArray[np.float64]:
        """`fair_tree` on a trace's tree whose accounts have one user each (a trace without
        users, or one user per account), without the walk: the same arithmetic, on lists for up
        to 64 leaves (a dozen numpy calls cost more than the arithmetic on a dozen leaves, at
        every priority recalculation), on arrays above.

        There, leaf i is the i-th account's only user and root's children are the accounts in
        leaf order; an account counts exactly when its user does, so the n counted users' level
        fair share is S / U with S = 1 / n and U = usage / root's usage (root's usage summed in
        the walk's order, leaf order, so that the float is the same), and each user's own level
        (one sibling, S = 1) only passes its account's tie on. Accounts sorted stably by
        descending S / U get rank n - (position of the first of their tie)."""
        if self.leaves <= 64:
            return self._small_flat_fair_tree(used.tolist(), known.tolist())
        return self._array_flat_fair_tree(used, known)

    def _array_flat_fair_tree(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                              ) -> npt.NDArray[np.float64]:
        """`_flat_fair_tree` on arrays, for many leaves."""
        out = np.ones(self.leaves)
        idx = np.flatnonzero(known)
        n = len(idx)
        if n <= 1:
            return out
        total = 0.0
        for x in used.tolist():  # (not sum(): Python 3.12's compensates, the walk does not)
            total += x
        if total > 0:
            u = used[idx] / total
            with np.errstate(divide="ignore", over="ignore"):  # a subnormal share: inf, as the walk's
                lfs = np.where(u > 0, (1.0 / n) / u, math.inf)
        else:
            lfs = np.full(n, math.inf)
        order = np.argsort(-lfs, kind="stable")
        g = lfs[order]
        new = np.ones(n, dtype=bool)
        new[1:] = g[1:] != g[:-1]
        first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
        out[idx[order]] = (n - first) / n
        return out

    def _small_flat_fair_tree(self, used: list[float], known: list[bool]) -> npt.NDArray[np.float64]:
        """`_flat_fair_tree` on lists: the same float operations in the same order, and Python's
        sort is as stable as numpy's."""
        idx = [i for i, k in enumerate(known) if k]
        n = len(idx)
        if n <= 1:
            return np.ones(self.leaves)
        total = 0.0
        for x in used:
            total += x
        share = 1.0 / n
        inf = math.inf
        if total > 0:
            lfs = []
            for i in idx:
                u = used[i] / total
                lfs.append(share / u if u > 0 else inf)
        else:
            lfs = [inf] * n
        out = [1.0] * self.leaves
        first, prev = 0, None
        for pos, k in enumerate(sorted(range(n), key=lambda k: -lfs[k])):
            if lfs[k] != prev:
                first, prev = pos, lfs[k]
            out[idx[k]] = (n - first) / n
        return np.array(out)

    def classic(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                ) -> npt.NDArray[np.float64]:
        """The classic factor (``PriorityFlags=NO_FAIR_TREE``) of every leaf: 2^(-UE / S) with S
        the product of share fractions down the path and effective usage UE = UA + (UE_parent -
        UA) * shares / counted siblings' shares, UA = usage / all usage, UE_root = 1. Leaves that
        do not count, and every leaf while there is no usage, get 1."""
        if self._flat:
            return self._flat_classic(used, known)
        return self._walk_classic(used, known)

    def _walk_classic(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                      ) -> npt.NDArray[np.float64]:
        """`classic` on any tree, by walking it."""
        out = np.ones(self.leaves)
        use, act = self._usage_and_active(used, known)
        total = use[0]
        if total <= 0:
            return out
        level = self._level_shares(act)
        m = len(self.parent)
        s_norm, ue = [1.0] * m, [1.0] * m
        for k in reversed(self._post_order()):  # parents before children
            p = self.parent[k]
            if p < 0 or not act[k]:
                continue
            frac = self.shares[k] / level[p] if level[p] > 0 else 0.0
            s_norm[k] = s_norm[p] * frac
            ua = use[k] / total
            ue[k] = ua + (ue[p] - ua) * frac if level[p] > 0 else ue[p]
            if self.is_user[k]:
                out[self.leaf[k]] = 2.0 ** (-ue[k] / s_norm[k]) if s_norm[k] > 0 else 0.0
        return out

    def _flat_classic(self, used: npt.NDArray[np.float64], known: npt.NDArray[np.bool_]
                      ) -> npt.NDArray[np.float64]:
        """`classic` on a trace's tree whose accounts have one user each, in one pass over the
        leaves instead of three walks over every node (it runs at every priority recalculation;
        on the bundled sample's 11 accounts the walks cost 3.2x as much, benchmarks/fair_share.py).

        There the shares are constant but for how many users count: each of the n counted
        accounts has S = 1 / n, and its only user S = (1 / n) x 1. An account's usage is its
        user's (0.0 + it), so both have UA = usage / all usage (all usage summed in the walk's
        order, leaf order: the same float), and the user's UE = UA + (UE_account - UA) x 1 with
        UE_account = UA + (1 - UA) / n: the walk's arithmetic step by step, so the floats are its."""
        used_l, known_l = used.tolist(), known.tolist()
        total = 0.0
        for x in used_l:  # (not sum(): Python 3.12's compensates, the walk does not)
            total += x
        n = sum(known_l)
        if total <= 0 or n == 0:
            return np.ones(self.leaves)
        frac = 1.0 / n
        out = [1.0] * self.leaves
        for i, u in enumerate(used_l):
            if known_l[i]:
                ua = u / total
                ue = ua + (1.0 - ua) * frac  # the account's
                ue = ua + (ue - ua) * 1.0  # its user's
                out[i] = 2.0 ** (-ue / frac)
        return np.array(out)
