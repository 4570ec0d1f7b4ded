"""Structured log lines: one JSON object per line, for ``agent run`` and the service.

Every line has ``time`` (UTC, ISO 8601 with seconds), ``event`` and ``pid``; the rest depends on
the event (docs/service.md lists them):

- ``round``: ``actor``, ``action`` (what the round did), ``trigger``, ``why``, ``seconds`` (how
  long it took), and ``revision`` and ``state`` when it made or moved one (``diff`` when it
  went live);
- ``approve``, ``reject``, ``rollback``, ``apply_failed``, ``restore``, ``include``,
  ``freeze``, ``unfreeze``, ``adopt``: ``actor``, ``why``, ``revision``, ``state``, and
  ``diff`` where Slurm was reconfigured;
- ``request`` (the service): ``method``, ``path``, ``status``, ``client`` of every request that is
  not a read, allowed or refused;
- ``message``: ``message``, anything else the agent says (a webhook that failed, ...).

journald, Loki or ``jq`` read them as they are.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

from .activity import Activity


def log_line(record: dict[str, Any], when: float | None = None) -> str:
    """`record` as one log line: ``time`` first, then ``event``, then the rest; never a newline
    inside (JSON escapes them)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if when is None else when))
    return json.dumps({"time": stamp, **record, "pid": os.getpid()}, default=str)


class JsonLog:
    """An `ActivitySink` writing one line per activity (and per `write`) to `stream` (default:
    standard error, read at each write so that a test or a redirection sees it)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.lost = 0  # lines the stream did not take

    def __call__(self, activity: Activity) -> None:
        self.write(activity.to_record(), activity.time)

    def write(self, record: dict[str, Any], when: float | None = None) -> None:
        out = self.stream if self.stream is not None else sys.stderr
        try:
            print(log_line(record, when), file=out, flush=True)
        except (OSError, ValueError) as e:
            # a closed or full log stream must not stop a round; said once, on stderr
            self.lost += 1
            if self.lost == 1 and out is not sys.stderr:
                try:
                    print(f"warning: the JSON log cannot be written ({getattr(e, 'strerror', None) or e}"
                          "); its lines are lost until it can", file=sys.stderr, flush=True)
                except (OSError, ValueError):
                    pass

    def message(self, text: str) -> None:
        """A free-text message of the agent, as a ``message`` line (use as `Agent.log`)."""
        self.write({"event": "message", "message": text})
