"""A thin client of the agent's HTTP service (``autosched agent serve``), for operators' scripts.

Standard library only, so a script on any host can use it::

    from autosched.client import Client
    c = Client("http://127.0.0.1:8750", token_file="/var/lib/autosched/service.token")
    pending = c.status()["pending"]
    gain = pending and pending["evidence"]["predicted_gain"]  # None when not recorded
    if gain is not None and gain > 0.05:
        c.approve(pending["id"], operator="alice")

``status()`` is `autosched.live.status.AgentStatus` as JSON (what ``agent status --json``
prints). A revision's ``evidence`` and ``outcome`` hold every key of
`autosched.live.store.Evidence` and `autosched.live.store.JudgedOutcome` (``predicted_gain``,
``spread``, ``samples``, ..., ``rollback_of``, ``to``; ``metric``, ``predicted_gain``,
``verdict``, ``counterfactual_gain``, ``twin_error``, ``realized``, ``simulated_old``,
``simulated_new``, ``period``, ``gain_sd``, ``gain_min``, ``gain_max``, ``replays``,
``copies``), null where a revision has no such figure (the config found live,
a rollback, a change not judged yet).

Every method returns the API's JSON (dicts and lists). Errors raise `ServiceError` (and its
subclasses for 401, 404 and 409), whose message is the service's reason.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .errors import AutoschedError

DEFAULT_URL = "http://127.0.0.1:8750"


class ServiceError(AutoschedError):
    """The service refused a request or could not be reached (`status` 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Unauthorized(ServiceError):
    """401: missing or wrong token; nothing changed."""


class NotFound(ServiceError):
    """404: no such revision."""


class Conflict(ServiceError):
    """409: the agent's state does not allow the action; the message says why."""


_BY_STATUS = {401: Unauthorized, 404: NotFound, 409: Conflict}


class Client:
    """Talks to one service. `token` (or `token_file`) is needed for actions only."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None,
                 token_file: str | Path | None = None, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        if token is None and token_file is not None:
            try:
                token = Path(token_file).read_text().strip()
            except OSError as e:
                raise ServiceError(f"{token_file}: cannot read the token: {e.strerror}") from None
        self.token = token
        self.timeout = timeout

    # -- reads ----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return self._call("GET", "/api/status")

    def revisions(self, limit: int | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/api/revisions" + (f"?limit={int(limit)}" if limit is not None else ""))

    def revision(self, rev_id: int) -> dict[str, Any]:
        return self._call("GET", f"/api/revisions/{int(rev_id)}")

    def proposals(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/proposals")

    def outcomes(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/outcomes")

    def openapi(self) -> dict[str, Any]:
        return self._call("GET", "/api/openapi.json")

    # -- actions (need the token) ---------------------------------------------------------
    def approve(self, rev_id: int, operator: str | None = None,
                force: bool = False) -> dict[str, Any]:
        return self._call("POST", f"/api/revisions/{int(rev_id)}/approve",
                          _body(operator=operator, force=force or None))

    def reject(self, rev_id: int, reason: str = "", operator: str | None = None
               ) -> dict[str, Any]:
        return self._call("POST", f"/api/revisions/{int(rev_id)}/reject",
                          _body(operator=operator, reason=reason))

    def rollback(self, revision: int | None = None, operator: str | None = None,
                 force: bool = False) -> dict[str, Any]:
        return self._call("POST", "/api/rollback", _body(operator=operator, revision=revision,
                                                          force=force or None))

    def freeze(self, reason: str = "", operator: str | None = None) -> dict[str, Any]:
        return self._call("POST", "/api/freeze", _body(operator=operator, reason=reason))

    def unfreeze(self, operator: str | None = None) -> dict[str, Any]:
        return self._call("POST", "/api/unfreeze", _body(operator=operator))

    # -- transport ------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if method == "POST":
            data = json.dumps(body or {}).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise _error(e) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ServiceError(f"{self.url}: cannot reach the service: {reason}") from None


def _body(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None and v != ""}


def _error(e: urllib.error.HTTPError) -> ServiceError:
    try:
        detail = json.loads(e.read()).get("detail", e.reason)
    except (ValueError, AttributeError, OSError):
        detail = e.reason
    if not isinstance(detail, str):  # 422: pydantic's list of what was wrong
        detail = "; ".join(f"{'.'.join(map(str, d.get('loc', ())))}: {d.get('msg')}"
                           for d in detail) if isinstance(detail, list) else json.dumps(detail)
    return _BY_STATUS.get(e.code, ServiceError)(f"HTTP {e.code}: {detail}", e.code)
