"""What an operator approves: the include file exactly as the apply will write it.

`Agent.preview` answers, for a proposal, the file the connector would write (`IncludeChange`,
byte for byte what `Connector.apply` writes) and its unified diff against the file as it is. The
status page shows that diff and asks for the operator's name before the final click; the approve
that follows sends the diff back, and is refused when the file would now be written otherwise.
The store records who approved and the diff written with the revision (`store.Approval`).
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .connector import IncludeChange
from .records import Revision


@dataclass(frozen=True)
class IncludePreview:
    """What approving `revision` would write: the include file `path` as it is (`before`; None
    when it does not exist yet), as it will be (`after`), and the unified `diff` between them."""

    revision: int
    path: str
    before: str | None
    after: str
    diff: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


STORE_MARK = "store: "  # a header line: which agent's store wrote the include file


def apply_header(rev: Revision, store: Path) -> str:
    """The comment an apply of `rev` writes at the top of the include file: the revision, and the
    store it is recorded in (two agents on one include file can then tell each other's writes
    from a hand edit)."""
    return f"revision {rev.id} ({rev.trigger})\n{STORE_MARK}{store}"


def include_writer(text: str | None) -> str | None:
    """The store the include file `text` names as its writer (`apply_header`), or None when it
    names none (a file autosched has not written, or an older autosched wrote)."""
    for line in (text or "").splitlines():
        if line.startswith("# " + STORE_MARK):
            return line[len("# " + STORE_MARK):].strip()
    return None


def include_diff(change: IncludeChange, rev_id: int) -> str:
    """The unified diff of `change` ("" when the file stays as it is); lines end in ``\\n``."""
    lines = difflib.unified_diff((change.before or "").splitlines(), change.after.splitlines(),
                                 fromfile=f"{change.path} (now)",
                                 tofile=f"{change.path} (revision {rev_id})", lineterm="")
    text = "\n".join(lines)
    return text + "\n" if text else ""


def preview_of(rev_id: int, change: IncludeChange) -> IncludePreview:
    return IncludePreview(rev_id, change.path, change.before, change.after,
                          include_diff(change, rev_id))


def same_diff(confirmed: str, diff: str) -> bool:
    """Whether the diff an approver confirmed is `diff` (line endings as a browser may send)."""
    return confirmed.replace("\r\n", "\n") == diff
