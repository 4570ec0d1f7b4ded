"""What backfill costs slurmctld, from ``sdiag``, and the rule that takes back a change it cannot
afford.

The twin treats a backfill cycle as free: a proposal may raise ``bf_max_job_test`` to thousands or
shorten ``bf_interval``, which on a large queue makes each cycle longer than the interval it runs
in (slurmctld then backfills back to back and answers RPCs late). Every round reads ``sdiag``'s
backfill statistics (`BackfillStats`); the round that proposes records them with its evidence
(the cost before the change), the status and the page show the newest, and once the running
revision changed a ``bf_*`` knob, a cycle that ran after it went live and took longer than its
``bf_interval``, where the cycles before the change fit, rolls it back (`overrun`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class BackfillStats:
    """``sdiag``'s backfill statistics (times in seconds; None where sdiag printed none): how many
    cycles ran since its counters were reset, when the last one ran (unix s), how long it took,
    the longest and the mean, how many jobs it looked at (depth) and the queue it had."""

    cycles: int
    last_cycle_at: float | None
    last_cycle: float | None
    max_cycle: float | None
    mean_cycle: float | None
    last_depth: int | None
    mean_depth: float | None
    queue_length: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> BackfillStats | None:
        """A recorded `to_dict` (None when `d` is not one)."""
        if not isinstance(d, dict) or not isinstance(d.get("cycles"), int):
            return None

        def num(key: str) -> float | None:
            v = d.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        def whole(key: str) -> int | None:
            v = d.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        return cls(cycles=int(d["cycles"]), last_cycle_at=num("last_cycle_at"),
                   last_cycle=num("last_cycle"), max_cycle=num("max_cycle"),
                   mean_cycle=num("mean_cycle"), last_depth=whole("last_depth"),
                   mean_depth=num("mean_depth"), queue_length=whole("queue_length"))

    def text(self) -> str:
        """One line for the status and the page."""
        if not self.cycles or self.last_cycle is None:
            return "no backfill cycle since sdiag's counters were reset"
        parts = [f"last cycle {_ms(self.last_cycle)}"]
        more = [f"{name} {_ms(v)}" for name, v in (("max", self.max_cycle),
                                                    ("mean", self.mean_cycle)) if v is not None]
        if more:
            parts[0] += f" ({', '.join(more)})"
        if self.last_depth is not None:
            parts.append(f"depth {self.last_depth}" + (
                f" of {self.queue_length} queued" if self.queue_length is not None else ""))
        parts.append(f"{self.cycles:,} cycles")
        return ", ".join(parts)


def _ms(seconds: float) -> str:
    if seconds < 0.01:
        return f"{seconds * 1000:.2f} ms"
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


_LINE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ()]*?)\s*:\s*(?P<value>.*?)\s*$")
_WHEN = re.compile(r"\((\d+)\)\s*$")


def parse_sdiag(text: str) -> BackfillStats:
    """The "Backfilling stats" section of ``sdiag``'s output (microseconds read as seconds)."""
    section: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if line.strip().lower().startswith("backfilling stats"):
            inside = True
            continue
        if inside:
            if line.strip() and not line[:1].isspace():
                break  # the next section
            m = _LINE.match(line)
            if m:
                section[m["key"].lower()] = m["value"]

    def num(key: str, per: float = 1.0) -> float | None:
        try:
            return float(section[key]) / per
        except (KeyError, ValueError):
            return None

    def whole(key: str) -> int | None:
        v = num(key)
        return None if v is None else int(v)

    when = _WHEN.search(section.get("last cycle when", ""))
    return BackfillStats(cycles=whole("total cycles") or 0,
                         last_cycle_at=float(when[1]) if when else None,
                         last_cycle=num("last cycle", 1e6), max_cycle=num("max cycle", 1e6),
                         mean_cycle=num("mean cycle", 1e6), last_depth=whole("last depth cycle"),
                         mean_depth=num("depth mean"), queue_length=whole("last queue length"))
