"""A Slurm association tree (accounts and users with fair-share shares), as slurmdbd holds it.

Slurm's fair share counts every association in the tree, including ones that never submit a job
(the ``root`` user's association under the ``root`` account is in every cluster). A simulation
that counts only the associations of its trace ranks users differently from the real
slurmctld (docs/fidelity.md), so a cluster may carry its configured tree: read it from
``sacctmgr -P show assoc format=Account,User,ParentName,Share``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .atomic import check_input
from .errors import InputError
from .trace.parsing import found_columns

ROOT = "root"


@dataclass(frozen=True)
class Association:
    """One association: an account (``user`` empty) under ``parent``, or a user in ``account``.
    ``shares`` is Slurm's raw share (``fairshare=``)."""

    account: str
    user: str = ""
    parent: str = ""
    shares: int = 1


def read_associations(path: Path | str) -> tuple[Association, ...]:
    """The associations of a ``sacctmgr -P show assoc`` listing (columns Account, User,
    ParentName, Share; others, such as Cluster, are ignored), in the listing's order (slurmdbd's
    tree order, which is also the order Fair Tree visits tied siblings in)."""
    path = Path(path)
    check_input(path, "sacctmgr -P show assoc listing")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f, delimiter="|"))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot read the association listing ({e})") from None
    return parse_associations(rows, str(path))


def parse_associations(rows: list[list[str]], where: str) -> tuple[Association, ...]:
    """The associations of a ``sacctmgr -P show assoc`` listing split into cells (the header
    first), as `read_associations` reads them; errors name `where` and the line."""
    if not rows:
        raise InputError(f"{where}: empty association listing")
    header = [c.strip().lower() for c in rows[0]]
    need = ("account", "user", "parentname", "share")
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(f"{where}: line 1: need columns Account, User, ParentName, Share "
                         f"(missing {', '.join(missing)}); found {found_columns(rows[0])}")
    ia, iu, ip, is_ = (header.index(c) for c in need)
    out: list[Association] = []
    for line, r in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in r):
            continue
        if len(r) < len(header):
            raise InputError(f"{where}: line {line}: {len(r)} fields, the header has {len(header)}")
        acct, user, parent, share = r[ia].strip(), r[iu].strip(), r[ip].strip(), r[is_].strip()
        if not acct:
            raise InputError(f"{where}: line {line}, column 'Account': empty")
        try:
            shares = int(share)
        except ValueError:
            raise InputError(f"{where}: line {line}, column 'Share': {share!r} is not an integer "
                             "(fairshare=parent is not modelled)") from None
        if shares < 0:
            raise InputError(f"{where}: line {line}, column 'Share': must be >= 0 (got {shares})")
        out.append(Association(acct, user, parent if not user else acct, shares))
    return check_tree(out, where)


def check_tree(assocs: list[Association] | tuple[Association, ...], where: str = "association tree"
               ) -> tuple[Association, ...]:
    """The associations as a tuple, after checking that they form one tree under ``root``."""
    accounts = {a.account for a in assocs if not a.user}
    if ROOT not in accounts:
        raise InputError(f"{where}: no 'root' account")
    seen: set[tuple[str, str]] = set()
    for a in assocs:
        key = (a.account, a.user)
        if key in seen:
            raise InputError(f"{where}: association {a.account}/{a.user or '-'} appears twice")
        seen.add(key)
        if a.user and a.account not in accounts:
            raise InputError(f"{where}: user {a.user!r} is in account {a.account!r}, which is not listed")
        if not a.user and a.account != ROOT and a.parent not in accounts:
            raise InputError(f"{where}: account {a.account!r} has parent {a.parent!r}, which is not listed")
    parent = {a.account: a.parent for a in assocs if not a.user}
    for acct in parent:
        seen_up, up = set(), acct
        while up != ROOT:
            if up in seen_up:
                raise InputError(f"{where}: account {acct!r} does not lead to root (its parents form a cycle)")
            seen_up.add(up)
            up = parent[up]
    return tuple(assocs)
