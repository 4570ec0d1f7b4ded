"""Slurm's configured association tree: reading `sacctmgr -P show assoc`, and fair share over it
counted as slurmctld counts (every association, the root user's included). Factors worked out by
hand in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.associations import Association, read_associations
from autosched.cluster import ClusterSpec
from autosched.errors import InputError, SimulationError
from autosched.policies import get_policy
from autosched.policies.fairshare import ShareTree
from autosched.sim import Simulator
from simkit import make_trace

# As the testbed's slurmdbd lists it (sacctmgr -P show assoc format=Cluster,Account,User,ParentName,Share)
LISTING = """Cluster|Account|User|ParentName|Share
testcluster|root|||1
testcluster|root|root||1
testcluster|P||root|1
testcluster|P|a||1
testcluster|P|b||1
testcluster|C||root|1
testcluster|C|c||1
"""


@pytest.fixture
def assocs(tmp_path):
    path = tmp_path / "assoc.txt"
    path.write_text(LISTING)
    return read_associations(path)


def test_read_associations(assocs):
    assert assocs == (
        Association("root", "", "", 1), Association("root", "root", "root", 1),
        Association("P", "", "root", 1), Association("P", "a", "P", 1), Association("P", "b", "P", 1),
        Association("C", "", "root", 1), Association("C", "c", "C", 1),
    )


def test_fair_tree_counts_the_root_users_association(assocs):
    # Leaves in listing order: root, a, b, c; usage 0, 30, 10, 60; 4 users.
    # Under root (3 siblings, S = 1/3 each): root user U = 0 -> infinite; P 1/3 / 0.4 = 0.83;
    # C 1/3 / 0.6 = 0.56. root rank 4; in P: b (0.5 / 0.25 = 2) rank 3, a (0.5 / 0.75) rank 2;
    # c rank 1. Factors rank / 4. (Without the root user's association: 2/3, 1, 1/3 for a, b, c.)
    tree = ShareTree.from_associations(assocs)
    used = np.array([0.0, 30.0, 10.0, 60.0])
    assert tree.fair_tree(used, np.zeros(4, dtype=bool)).tolist() == [1.0, 0.5, 0.75, 0.25]


def test_classic_factor_over_the_configured_tree(assocs):
    # UE(root user) = 0 + (1 - 0) / 3 -> 2^-(1/3 / 1/3) = 0.5; UE(P) = 0.4 + 0.6 / 3 = 0.6,
    # a: 0.3 + (0.6 - 0.3) / 2 = 0.45 over S = 1/6 -> 2^-2.7; b: 0.1 + 0.25 = 0.35 -> 2^-2.1;
    # UE(C) = 0.6 + 0.4 / 3, c: the same over 1/3 -> 2^-2.2.
    tree = ShareTree.from_associations(assocs)
    got = tree.classic(np.array([0.0, 30.0, 10.0, 60.0]), np.zeros(4, dtype=bool))
    assert got == pytest.approx([0.5, 2 ** -2.7, 2 ** -2.1, 2 ** -2.2], rel=1e-12)


def test_shares_other_than_equal(tmp_path):
    # P has 3 shares, C 1: P 0.75 / 0.5 = 1.5, C 0.25 / 0.5 = 0.5 with usage a 50, c 50: P first.
    path = tmp_path / "a.txt"
    path.write_text("Account|User|ParentName|Share\nroot|||1\nP||root|3\nP|a||1\nC||root|1\nC|c||1\n")
    tree = ShareTree.from_associations(read_associations(path))
    assert tree.fair_tree(np.array([50.0, 50.0]), np.zeros(2, dtype=bool)).tolist() == [1.0, 0.5]


def test_the_simulator_uses_the_configured_tree(assocs):
    # One node of 10 GPUs: a (3 GPUs), b (1), c (6) run 0-60 together; a job arriving at 61
    # brings the recalculation at 60: usage a:b:c = 3:1:6 as above -> 0.5, 0.75, 0.25; root 1.
    jobs = [(0, 3, 60), (0, 1, 60), (0, 6, 60), (61, 1, 10)]
    trace = make_trace(jobs, ["a", "b", "c", "a"]).replace(account=np.array(["P", "P", "C", "P"], dtype=object))
    spec = ClusterSpec.uniform_nodes(1, 10, associations=assocs)
    cfg = {"PriorityCalcPeriod": 1, "PriorityDecayHalfLife": 600.0}
    sim = Simulator(trace, spec, get_policy("multifactor")(cfg)).run()
    assert sim.policies[0].fairshare.tolist() == [1.0, 0.5, 0.75, 0.25]


def test_a_job_outside_the_tree_is_refused(assocs):
    trace = make_trace([(0, 1, 10)], ["zed"]).replace(account=np.array(["P"], dtype=object))
    with pytest.raises(SimulationError, match=r"job in row 0 of the trace: association P/zed is not in"):
        Simulator(trace, ClusterSpec.uniform_nodes(1, 4, associations=assocs),
                  get_policy("multifactor")({}))


@pytest.mark.parametrize("text, message", [
    ("Account|User|Share\nroot||1\n",
     r"need columns Account, User, ParentName, Share \(missing parentname\); found Account, User, Share$"),
    ("Account|User|ParentName|Share\nroot|||1\nP||root|parent\n", "line 3, column 'Share': 'parent'"),
    ("Account|User|ParentName|Share\nP||root|1\n", "no 'root' account"),
    ("Account|User|ParentName|Share\nroot|||1\nP|a||1\n", "user 'a' is in account 'P', which is not listed"),
    ("Account|User|ParentName|Share\nroot|||1\nP||X|1\n", "account 'P' has parent 'X'"),
    ("Account|User|ParentName|Share\nroot|||1\nroot|u||1\nroot|u||1\n", "root/u appears twice"),
    ("Account|User|ParentName|Share\nroot|||1\nP||Q|1\nQ||P|1\n", "account 'P' does not lead to root"),
])
def test_bad_listings_name_the_line_and_rule(tmp_path, text, message):
    path = tmp_path / "a.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        read_associations(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("assocs, message", [
    # P and Q are each other's parent: neither leads to root (fair share would never reach them)
    ((Association("root"), Association("P", "", "Q"), Association("Q", "", "P"), Association("P", "a", "P")),
     "the cluster's association tree: account 'P' does not lead to root"),
    ((Association("P", "", "root"),), "the cluster's association tree: no 'root' account"),
])
def test_a_cluster_spec_refuses_an_association_tree_that_is_not_one(assocs, message):
    # A tree given in code, not read from a listing, is checked where the cluster is made.
    with pytest.raises(InputError, match=message):
        ClusterSpec.uniform_nodes(1, 4, associations=assocs)

