"""What every request passes before the application reads it: the token for anything that sends a
body, a cap on the body's size, and a JSON log line per action.

An ASGI middleware rather than FastAPI dependencies, because FastAPI reads and parses a request's
body before it runs a route's dependencies: a 50 MB POST without a token would be read whole,
parsed, and echoed back in a 422 before the token check said 401. Here:

- a request with a body (any method but GET, HEAD, OPTIONS: every action) needs the bearer token,
  checked before one byte of the body is read (401, nothing read);
- a body larger than `MAX_BODY` is refused with 413, from its ``Content-Length`` before reading
  it, or as soon as a body sent without one goes past the cap; at most `MAX_BODY` bytes are ever
  held;
- a 422 lists where and what was wrong, never the input itself (`validation_error`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .token import token_matches

MAX_BODY = 64 * 1024  # bytes: the largest body an action takes is a name, a reason and a diff
UNAUTHORISED = ("a valid bearer token is required (Authorization: Bearer TOKEN; the token is in "
                "the state directory's service.token)")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_MAX_ERRORS = 10  # validation errors listed in one 422
_MAX_MSG = 200  # characters of one validation message

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
LogLine = Callable[[dict[str, Any]], None]


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else None."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, cred = value.decode("latin-1").partition(" ")
            return cred.strip() if scheme.lower() == "bearer" and cred.strip() else None
    return None


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else -1
    return None


class RequestGuard:
    """The middleware (see the module doc). `token` is the service's token; `log`, if given,
    receives one record per request that is not a read (an action, allowed or refused)."""

    def __init__(self, app: ASGIApp, *, token: str, max_body: int = MAX_BODY,
                 log: LogLine | None = None) -> None:
        self.app, self.token, self.max_body, self.log = app, token, max_body, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS:
            await self.app(scope, receive, send)
            return
        status: dict[str, int] = {}

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self._guarded(scope, receive, send_logged)
        finally:
            if self.log is not None:
                self.log({"event": "request", "method": scope["method"], "path": scope["path"],
                          "status": status.get("code", 0),
                          "client": (scope.get("client") or ("", 0))[0]})

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers") or []
        if not token_matches(bearer(headers), self.token):
            await _json(send, 401, UNAUTHORISED, [(b"www-authenticate", b"Bearer")])
            return
        length = _content_length(headers)
        if length is not None and (length < 0 or length > self.max_body):
            await _json(send, 413, self._too_large(length))
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body:
                await _json(send, 413, self._too_large(None))
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_large(self, length: int | None) -> str:
        size = f"{length} bytes" if length is not None and length >= 0 else "unknown size"
        return (f"request body too large ({size}); the service takes at most {self.max_body} "
                "bytes")


async def _json(send: Send, status: int, detail: str,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def validation_error(request: Any, exc: RequestValidationError) -> JSONResponse:
    """A 422 that says where and what was wrong (``loc``, ``msg``, ``type``), at most
    `_MAX_ERRORS` of them; never the input, which may be megabytes or a secret."""
    errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))[:_MAX_MSG],
               "type": str(e.get("type", ""))} for e in exc.errors()[:_MAX_ERRORS]]
    return JSONResponse({"detail": errors}, status_code=422)

