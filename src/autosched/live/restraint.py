"""What holds the agent back after what it did: the calibration record of its predictions against
the judge's measures, the brake that turns auto mode into proposals while they overshoot, and the
cooldown of a config an operator rejected. Pure: each rule reads the store's revisions (newest
first, as `Store.history` gives them) and the time.

- **Calibration**: each judged change's predicted gain beside its counterfactual gain (the
  judge's, in the twin on the period's real jobs). A prediction *overshoots* when the judged gain
  is under half of it: an operator's test saw +23.6% predicted and +0.0% judged, +9.6% and +0.6%.
- **Brake**: when the last `brake` judged changes all overshot, auto mode proposes instead of
  applying, until a judged change meets its prediction (an operator's approved change counts:
  it is judged as the agent's are).
- **Cooldown**: a config an operator rejected is not proposed again for `cooldown` s after the
  rejection; the agent proposes the next best or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .records import Revision, RevisionState

OVERSHOOT = 0.5  # a judged gain under this fraction of the predicted one overshot
BRAKE_AFTER = 2  # consecutive overshoots that put on the brake (0: never)


@dataclass(frozen=True)
class Calibrated:
    """One judged change: its prediction and the judge's measure (relative gains)."""

    revision: int
    predicted: float
    judged: float

    @property
    def overshot(self) -> bool:
        return self.predicted > 0 and self.judged < OVERSHOOT * self.predicted

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "predicted": self.predicted, "judged": self.judged,
                "overshot": self.overshot}


def calibration(revisions: Sequence[Revision], last: int = 10) -> list[Calibrated]:
    """The last `last` judged changes (newest first) that had a prediction and got a measure."""
    out = []
    for r in revisions:
        o = r.outcome
        if o is not None and o.predicted_gain is not None and o.counterfactual_gain is not None:
            out.append(Calibrated(r.id, float(o.predicted_gain), float(o.counterfactual_gain)))
        if len(out) == last:
            break
    return out


def brake(record: Sequence[Calibrated], after: int = BRAKE_AFTER) -> str:
    """Why auto mode proposes instead of applying ("": it applies): the newest `after` judged
    changes of the `record` (newest first) all overshot."""
    if after <= 0 or len(record) < after or not all(c.overshot for c in record[:after]):
        return ""
    said = "; ".join(f"revision {c.revision}: {c.predicted:+.1%} predicted, {c.judged:+.1%} judged"
                     for c in record[:after])
    return (f"brake: the last {after} changes' predictions overshot ({said}); auto mode proposes until "
            "a judged change meets at least half its prediction")


def cooling(revisions: Sequence[Revision], config: Mapping[str, Any], now: float,
            cooldown: float) -> Revision | None:
    """The revision an operator rejected within `cooldown` s of `now` whose config is `config`
    (None: no such one). The agent's own refusals (a stale proposal, ``agent:`` actors) do not
    count: only an operator's judgement does."""
    if cooldown <= 0:
        return None
    for r in revisions:
        last = r.events[-1]
        if (r.state is RevisionState.REJECTED and not last.actor.startswith("agent:")
                and now - last.time < cooldown and dict(r.config) == dict(config)):
            return r
    return None
