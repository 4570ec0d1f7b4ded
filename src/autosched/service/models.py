"""The API's request and response bodies: what the OpenAPI schema documents and what requests
are validated against (an unknown field, a negative revision or an over-long reason is a 422).
Request bodies are strict: a revision is a JSON integer (``true``, ``"1"`` or ``1.0`` is a 422,
not revision 1), a reason a JSON string.

A response body is a record of the live layer (`AgentStatus`, `Revision`, `Flags`, the views'
`OutcomeRow`): its model is made here from the dataclass's own fields and types, nested records
included, so the schema cannot drift from what the CLI prints and the store holds."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..live.approval import IncludePreview
from ..live.audit import MAX_REASON_CHARS, NAME
from ..live.records import Flags, Revision
from ..live.status import AgentStatus
from .views import OutcomeRow

_MODELS: dict[type, type[BaseModel]] = {}


def model_of(cls: type) -> type[BaseModel]:
    """The response model of dataclass `cls`: one required field per dataclass field (its JSON
    always has every key), with the field's type, a nested dataclass as its own model."""
    if cls not in _MODELS:
        hints = typing.get_type_hints(cls)
        fields: dict[str, Any] = {f.name: (_model_type(hints[f.name]), ...)
                                  for f in dataclasses.fields(cls)}
        _MODELS[cls] = create_model(cls.__name__, __doc__=cls.__doc__, **fields)
    return _MODELS[cls]


def _model_type(tp: Any) -> Any:
    """`tp` with every dataclass in it replaced by its model."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return model_of(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return Union[tuple(_model_type(a) for a in args)]  # noqa: UP007 (built at run time)
    if origin in (list, dict, tuple) and args:
        return origin[tuple(a if a is Ellipsis else _model_type(a) for a in args)]
    return tp


StatusOut = model_of(AgentStatus)
RevisionOut = model_of(Revision)
FlagsOut = model_of(Flags)
OutcomeOut = model_of(OutcomeRow)
PreviewOut = model_of(IncludePreview)
# `list[RevisionOut]`, `list[OutcomeOut]`: written as values, since a model made at run time is not
# a type a checker can read inside brackets.
RevisionsOut = types.GenericAlias(list, (RevisionOut,))
OutcomesOut = types.GenericAlias(list, (OutcomeOut,))

# Who acted, as recorded in the revision's events ("operator:NAME"); letters, digits and ._@-
# (live/audit.py: the CLI's --actor and --reason follow the same rules)
OperatorName = Field(default=None, pattern=rf"^{NAME}$",
                     description="recorded as operator:NAME (default: service:token)")
# one line: no control character (a newline would forge a line of `agent status`)
Note = Field(default="", max_length=MAX_REASON_CHARS, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$")
MAX_DIFF = 32_000  # characters: an include file's diff is a few hundred


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Force = Field(default=False, description="apply even over a hand edit (a live value that is not "
                                         "the running revision's); without it that is a 409 "
                                         "naming each value. The discarded live values are "
                                         "recorded with the revision (`overridden`).")


class ApproveIn(_In):
    operator: str | None = OperatorName
    include_diff: str | None = Field(
        default=None, max_length=MAX_DIFF,
        description="the include file's diff as shown to the approver (GET "
                    "/api/revisions/{id}/preview); the approve is refused (409) unless the file "
                    "would be written so. Recorded with the revision either way.")
    force: bool = Force


class RejectIn(_In):
    operator: str | None = OperatorName
    reason: str = Note


class RollbackIn(_In):
    operator: str | None = OperatorName
    revision: int | None = Field(default=None, ge=1,
                                 description="the revision to return to (default: the one applied "
                                             "before the running one)")
    force: bool = Force


class FreezeIn(_In):
    operator: str | None = OperatorName
    reason: str = Note


class UnfreezeIn(_In):
    operator: str | None = OperatorName


class ErrorOut(BaseModel):
    detail: str
