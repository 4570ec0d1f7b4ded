"""The optional webhook (``agent init --notify URL``): a JSON POST when something an operator
should see happens.

Five notices, each from one `Activity` (`notice`): ``proposal`` (a round proposed a revision),
``apply`` (a revision went live: approved, or applied by a round in auto mode), ``rollback`` (an
operator's or the guard's), ``freeze``, and ``block`` (a round found the agent blocked for a new
reason; a block that goes on round after round is told once).

A notice never holds a round up for long and never fails one: the POST runs in a thread of its
own and is waited for at most `timeout` seconds; a receiver that is down, slow or answers an error
is reported in the agent's log, and the round or action goes on as if it had answered.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .activity import Activity, ActivityKind
from .errors import LiveError

TIMEOUT = 5.0  # s: the longest a notice may hold up the round or action that caused it
NOTICES = ("proposal", "apply", "rollback", "freeze", "block")
_ROUND_NOTICES = {"proposed": "proposal", "applied": "apply"}  # a round's action -> its notice


def check_url(url: str) -> str:
    """`url` if it can be a webhook (http or https, with a host), else `LiveError`."""
    if not isinstance(url, str) or not url:
        raise LiveError(f"notify URL {url!r}: give an http:// or https:// URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LiveError(f"notify URL {url!r}: give an http:// or https:// URL with a host")
    return url


def shown(url: str) -> str:
    """The URL as logs show it: scheme, host and port only (a webhook's path is often its
    secret)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/..."


def notice(activity: Activity) -> str | None:
    """Which notice `activity` is (one of `NOTICES`), or None when it is none."""
    kind = activity.kind
    if kind is ActivityKind.ROUND:
        if activity.action == "blocked":
            return "block" if activity.why != activity.blocked_before else None
        return _ROUND_NOTICES.get(activity.action or "")
    return {ActivityKind.APPROVE: "apply", ActivityKind.ROLLBACK: "rollback",
            ActivityKind.FREEZE: "freeze"}.get(kind)


def payload(name: str, activity: Activity, state_dir: str) -> dict[str, Any]:
    """The JSON body of notice `name`."""
    rev = activity.revision
    body: dict[str, Any] = {"event": name, "time": activity.time, "actor": activity.actor,
                            "why": activity.why, "state_dir": state_dir, "revision": None}
    if rev is not None:
        body["revision"] = {"id": rev.id, "state": rev.state.value, "trigger": rev.trigger,
                            "diff": {k: list(v) for k, v in rev.diff.items()},
                            "predicted_gain": rev.evidence.predicted_gain,
                            "spread": rev.evidence.spread}
    return body


_TIMED_OUT = "timed out"


class Webhook:
    """An `ActivitySink` that POSTs each notice to `url` (see the module doc); `log` gets one line
    per notice that was not delivered."""

    def __init__(self, url: str, state_dir: str, log: Callable[[str], None],
                 timeout: float = TIMEOUT) -> None:
        self.url = check_url(url)
        self.state_dir = state_dir
        self.log = log
        self.timeout = timeout

    def __call__(self, activity: Activity) -> None:
        name = notice(activity)
        if name is None:
            return
        data = json.dumps(payload(name, activity, self.state_dir), default=str).encode()
        failure: list[str] = []
        sender = threading.Thread(target=self._post, args=(data, failure), daemon=True,
                                  name="autosched-notify")
        start, timeout = time.monotonic(), self.timeout
        sender.start()
        sender.join(timeout)
        # (the POST's own timeout is the same: under load it may end the thread just before the
        # join does, and that is the same unanswered notice)
        if sender.is_alive() or failure == [_TIMED_OUT]:
            self.log(f"webhook {shown(self.url)}: {name} notice not answered within "
                     f"{timeout:g} s; going on without it")
        elif failure:
            self.log(f"webhook {shown(self.url)}: {name} notice not delivered: {failure[0]} "
                     f"(after {time.monotonic() - start:.1f} s)")

    def _post(self, data: bytes, failure: list[str]) -> None:
        req = urllib.request.Request(self.url, data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": "autosched-agent"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                resp.read(1024)
        except urllib.error.HTTPError as e:
            failure.append(f"HTTP {e.code}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)  # (a connect timeout comes wrapped in a URLError)
            failure.append(_TIMED_OUT if isinstance(reason, TimeoutError) else str(reason))
