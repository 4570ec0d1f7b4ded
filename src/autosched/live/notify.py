"""The optional webhook (``agent init --notify URL``): a JSON POST when something an operator
should see happens.

The notices, each from one `Activity` (`notice`): ``proposal`` (a round proposed a revision),
``apply`` (a revision went live: approved, or applied by a round in auto mode), ``rollback`` (an
operator's or the guard's), ``apply_failed`` (an apply, of any of these, did not take: the
previous settings came back), ``freeze``, ``unfreeze``, ``reject``, ``adopt``, ``restore`` (an
apply a killed process left was undone, Slurm reconfigured back), ``include`` (a round rewrote the
include file to carry slurm.conf's own entries, Slurm reconfigured), ``block`` (a round found the
agent blocked for a new reason; a block that goes on round after round is told once) and
``tuning_failed`` (a round could not tune: told when its reason is new, as a block).

A notice never holds anything up and never fails it: `Webhook` queues it and returns at once; one
thread of its own sends the queue in order, each POST given at most `timeout` seconds in all (a
receiver that trickles its answer counts as one that did not answer). A receiver that is down,
slow, answers an error or a redirect (never followed: a redirect would resend the notice to
another URL, as a GET without its body) is reported in the agent's log. A process that ends soon
after an action (a CLI command) calls `Webhook.flush` first, which waits at most `timeout` per
queued notice.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .activity import Activity, ActivityKind
from .errors import LiveError

TIMEOUT = 5.0  # s: the longest one notice may take to send
NOTICES = ("proposal", "apply", "rollback", "apply_failed", "freeze", "unfreeze", "reject",
           "adopt", "restore", "include", "block", "tuning_failed")
# a round's action -> its notice
_ROUND_NOTICES = {"proposed": "proposal", "applied": "apply"}
# a round's action told only when its reason is new (as a block that goes on is told once)
_ONCE = {"blocked": "block", "tuning failed": "tuning_failed"}


def check_url(url: str) -> str:
    """`url` if it can be a webhook (http or https, a host, a port that is a number, no
    whitespace or control character anywhere), else `LiveError`."""
    if not isinstance(url, str) or not url:
        raise LiveError(f"notify URL {url!r}: give an http:// or https:// URL")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise LiveError(f"notify URL {url!r}: holds whitespace or a control character; encode "
                        "it (%20, ...)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in [0, 65535]
    except ValueError as e:
        raise LiveError(f"notify URL {url!r}: {e}") from None
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
        if activity.action in _ONCE:
            return _ONCE[activity.action] if activity.why != activity.blocked_before else None
        return _ROUND_NOTICES.get(activity.action or "")
    return _ACTION_NOTICES.get(kind)


_ACTION_NOTICES = {ActivityKind.APPROVE: "apply", ActivityKind.ROLLBACK: "rollback",
                   ActivityKind.FREEZE: "freeze", ActivityKind.UNFREEZE: "unfreeze",
                   ActivityKind.REJECT: "reject", ActivityKind.ADOPT: "adopt",
                   ActivityKind.RESTORE: "restore", ActivityKind.INCLUDE: "include",
                   ActivityKind.APPLY_FAILED: "apply_failed"}


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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would send the notice on to the other URL as a GET
    without its body, and count it delivered. It fails as the HTTP status it is."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Webhook:
    """An `ActivitySink` that POSTs each notice to `url` (see the module doc); `log` gets one line
    per notice that was not delivered."""

    def __init__(self, url: str, state_dir: str, log: Callable[[str], None],
                 timeout: float = TIMEOUT) -> None:
        self.url = check_url(url)
        self.state_dir = state_dir
        self.log = log
        self.timeout = timeout
        self._queue: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        self._sender: threading.Thread | None = None

    def __call__(self, activity: Activity) -> None:
        """Queue the notice `activity` is (if any) and return at once."""
        name = notice(activity)
        if name is None:
            return
        data = json.dumps(payload(name, activity, self.state_dir), default=str).encode()
        with self._idle:
            self._pending += 1
            if self._sender is None or not self._sender.is_alive():
                self._sender = threading.Thread(target=self._send_all, daemon=True,
                                                name="autosched-notify")
                self._sender.start()
        self._queue.put((name, data))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued notice was sent or given up (at most `timeout` s; default:
        `timeout` per notice queued); whether none is left. A process that ends after an action
        calls it, or its notices die with it."""
        with self._idle:
            wait = self.timeout * (self._pending + 1) if timeout is None else timeout
            done = self._idle.wait_for(lambda: self._pending == 0, wait)
            if not done:
                self.log(f"webhook {shown(self.url)}: {self._pending} notice(s) not sent before "
                         "this process ended")
            return done

    def _send_all(self) -> None:
        """The sender thread: sends the queue in order, and ends once it is empty."""
        while True:
            try:
                name, data = self._queue.get(timeout=1.0)
            except queue.Empty:
                with self._idle:
                    if self._pending == 0:
                        self._sender = None
                        return
                continue
            try:
                self._send(name, data)
            except Exception as e:  # noqa: BLE001 - the sender thread must go on
                self.log(f"webhook {shown(self.url)}: {name} notice not delivered: {e}")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _send(self, name: str, data: bytes) -> None:
        """POST one notice, giving it `timeout` s in all; a failure is one log line."""
        failure: list[str] = []
        poster = threading.Thread(target=self._post, args=(data, failure), daemon=True,
                                  name="autosched-notify-post")
        start, timeout = time.monotonic(), self.timeout
        poster.start()
        poster.join(timeout)
        # (the POST's own timeout is the same: under load it may end the thread just before the
        # join does, and that is the same unanswered notice)
        if poster.is_alive() or failure == [_TIMED_OUT]:
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
            with _OPENER.open(req, timeout=self.timeout) as resp:
                resp.read(1024)
        except urllib.error.HTTPError as e:
            redirect = " (a redirect: notices are not sent on to another URL)" \
                if 300 <= e.code < 400 else ""
            failure.append(f"HTTP {e.code}{redirect}")
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)  # (a connect timeout comes wrapped in a URLError)
            failure.append(_TIMED_OUT if isinstance(reason, TimeoutError) else
                           f"{type(e).__name__}" if isinstance(e, http.client.HTTPException)
                           else str(reason))


def flush_all(sinks: list[Any], timeout: float | None = None) -> None:
    """`Webhook.flush` every webhook among `sinks` (a process about to end)."""
    for sink in sinks:
        if isinstance(sink, Webhook):
            sink.flush(timeout)


def notify_url(state_dir: Path, log: Callable[[str], None]) -> str | None:
    """The webhook URL saved in `state_dir`'s settings, read on its own (the kill switch tells
    the webhook even when the rest of the settings cannot be loaded); None when there is none or
    it cannot be read (said in `log`)."""
    from ..atomic import read_text_input
    from ..errors import InputError

    path = Path(state_dir) / "settings.json"
    try:
        data = json.loads(read_text_input(path, "JSON file of the agent's settings", 1 << 20))
        url = data.get("notify") if isinstance(data, dict) else None
        return None if url is None else check_url(url)
    except (InputError, LiveError, ValueError) as e:
        log(f"{path}: the webhook URL cannot be read ({str(e).splitlines()[0][:200]}); no notice "
            "is sent")
        return None
