"""Who acted and why, as the store's record keeps them: the one check of an actor's name and a
reason, for every way an action comes in (the CLI's ``--actor``/``--reason``, the API's
``operator``/``reason``). The record is what `agent status`, the page and the webhook show line by
line: a newline or another control character in it would forge a line, and a 100 KB name would
fill the page."""

from __future__ import annotations

import re

from ..errors import InputError

NAME = r"[A-Za-z0-9._@-]{1,64}"  # an operator's name (the API's `operator`)
# who acted: a name, or KIND:NAME ("operator:alice", "agent:auto", "service:token")
_ACTOR = re.compile(rf"{NAME}(?::{NAME})?")
MAX_REASON_CHARS = 1000


def check_actor(actor: str) -> str:
    """`actor` if it is a name or ``KIND:NAME`` (letters, digits and ``._@-``, at most 64 each),
    else `InputError`."""
    if not isinstance(actor, str) or not _ACTOR.fullmatch(actor):
        raise InputError(f"actor {actor[:80]!r}: use NAME or KIND:NAME (e.g. operator:alice), "
                         "each part 1 to 64 letters, digits or ._@-")
    return actor


def reason_problem(reason: str) -> str | None:
    """Why `reason` cannot be recorded (None: it can): longer than `MAX_REASON_CHARS`, or a
    control character (a newline too)."""
    if len(reason) > MAX_REASON_CHARS:
        return f"at most {MAX_REASON_CHARS:,} characters (got {len(reason):,})"
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in reason):
        return "one line without control characters"
    return None


def check_reason(reason: str) -> str:
    """`reason` if it can be recorded (`reason_problem`), else `InputError`."""
    problem = reason_problem(reason)
    if problem is not None:
        raise InputError(f"reason {reason[:60]!r}...: {problem}" if len(reason) > 60 else
                         f"reason {reason!r}: {problem}")
    return reason
