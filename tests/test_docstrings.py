"""Every public method of the core types says what it is for (docs/architecture.md lists them)."""

from __future__ import annotations

import inspect

import pytest

from autosched.adapt.controller import Controller
from autosched.cluster import ClusterSpec
from autosched.policies.base import Policy
from autosched.sim.contract import Partition, PolicyHooks
from autosched.sim.engine import Simulator
from autosched.space import ConfigSpace
from autosched.trace.table import Trace
from autosched.tune.tuner import Tuner
from autosched.workload.base import WorkloadModel

CORE = [Trace, ClusterSpec, Policy, ConfigSpace, Simulator, WorkloadModel, Tuner, Controller,
        Partition, PolicyHooks]


def _undocumented(cls: type) -> list[str]:
    """Public methods and properties defined on `cls` itself without a docstring of their own
    (an inherited docstring does not count: it describes the base's method)."""
    missing = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        elif isinstance(member, property):
            member = member.fget
        if inspect.isfunction(member) and not (member.__doc__ or "").strip():
            missing.append(name)
    return missing


@pytest.mark.parametrize("cls", CORE, ids=lambda c: c.__name__)
def test_core_types_document_every_public_method(cls):
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    assert _undocumented(cls) == [], f"{cls.__name__}: no docstring on {', '.join(_undocumented(cls))}"


def test_the_check_sees_a_missing_docstring():
    class Bare:
        """Documented class, undocumented members."""

        def method(self) -> None:
            pass

        @property
        def prop(self) -> int:
            return 1

        def _private(self) -> None:
            pass

    assert _undocumented(Bare) == ["method", "prop"]
