"""Hostile requests and inputs against the service, over a real socket: bodies that are huge or
sent without the token, 422s that would echo the request, revision ids SQLite cannot hold, loose
types, a store replaced under the running service, token files that are FIFOs or not text."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from autosched.errors import InputError
from autosched.live.store import RevisionStore
from autosched.service.guard import MAX_BODY
from autosched.service.token import load_or_create_token
from service_kit import AUTH, AUTOSCHED, SRC, TOKEN, call, make_app, seed, serve_in_thread


@pytest.fixture
def svc(tmp_path):
    """(base URL, store) of the service over a freshly seeded store (revision 2 proposed)."""
    store = seed(tmp_path / "state")
    with serve_in_thread(make_app(tmp_path / "state")) as url:
        yield url, store


def raw_head(url: str, head: str, timeout: float = 10.0) -> bytes:
    """Send only `head` (request line and headers) and return what the service answers before
    any body arrives: the service must answer without reading the body it announced."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(head.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


def snapshot(store: RevisionStore):
    return [r.to_dict() for r in store.history()], store.flags()


# -- bodies: the token first, a cap, no echo ---------------------------------------------------

def test_a_body_without_the_token_is_refused_before_it_is_read(svc):
    url, store = svc
    before = snapshot(store)
    # 50 MB announced, not one byte sent: the answer comes at once, without waiting for it
    head = ("POST /api/freeze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 50000000\r\n\r\n")
    start = time.monotonic()
    answer = raw_head(url, head)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert time.monotonic() - start < 5
    # a body that is not even JSON: still 401, never a 422 about the body
    status, body = call(url, "POST", "/api/freeze", b"{not json",
                        {"Content-Type": "application/json"})
    assert status == 401 and json.loads(body)["detail"].startswith("a valid bearer token")
    assert snapshot(store) == before


def test_a_body_over_the_cap_is_413_before_it_is_read(svc):
    url, store = svc
    before = snapshot(store)
    head = ("POST /api/freeze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: 50000000\r\n\r\n")
    answer = raw_head(url, head)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    # without a Content-Length (chunked), cut off as soon as it passes the cap
    reason = "r" * MAX_BODY
    status, body = call(url, "POST", "/api/freeze",
                        iter([json.dumps({"reason": reason}).encode()]),  # urllib: chunked
                        {**AUTH, "Transfer-Encoding": "chunked"})
    assert status == 413, body[:200]
    assert json.loads(body) == {"detail": f"request body too large (unknown size); the service "
                                          f"takes at most {MAX_BODY} bytes"}
    assert snapshot(store) == before
    # a body at the cap is read (and then judged by the schema)
    status, _ = call(url, "POST", "/api/freeze", b" " * (MAX_BODY - 2) + b"{}", AUTH)
    assert status == 200 and store.flags().frozen


def test_a_422_never_echoes_the_request(svc):
    url, store = svc
    before = snapshot(store)
    secret = "s3cr3t-" + "x" * 5000  # over the reason's 1000 characters, under the body cap
    status, body = call(url, "POST", "/api/freeze", json.dumps({"reason": secret}).encode(), AUTH)
    assert status == 422
    assert b"s3cr3t" not in body and len(body) < 400
    assert json.loads(body) == {"detail": [{"loc": ["body", "reason"],
                                            "msg": "String should have at most 1000 characters",
                                            "type": "string_too_long"}]}
    status, body = call(url, "POST", "/api/freeze", b'{"reason": "abc"', AUTH)  # cut-off JSON
    assert status == 422 and b"abc" not in body
    assert snapshot(store) == before


# -- ids and types --------------------------------------------------------------------------

HUGE = "99999999999999999999"  # more than SQLite's 2**63 - 1


def test_a_revision_id_sqlite_cannot_hold_is_404(svc):
    url, store = svc
    before = snapshot(store)
    for method, path, body in [("GET", f"/api/revisions/{HUGE}", None),
                               ("GET", f"/api/revisions/{HUGE}/preview", None),
                               ("POST", f"/api/revisions/{HUGE}/approve", b"{}"),
                               ("POST", f"/api/revisions/{HUGE}/reject", b"{}"),
                               ("POST", "/api/rollback", f'{{"revision": {HUGE}}}'.encode())]:
        status, answer = call(url, method, path, body, AUTH)
        assert (status, json.loads(answer)["detail"]) == (
            404, f"no revision {HUGE} in {store.path}"), (path, answer)
    assert snapshot(store) == before


def test_the_cli_says_no_such_revision_for_a_huge_id(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import build_app

    store = seed(tmp_path / "state")
    for cmd in (["approve", HUGE], ["reject", HUGE], ["rollback", HUGE]):
        r = CliRunner().invoke(build_app(), ["agent", *cmd, "--state", str(tmp_path / "state")])
        assert r.exit_code == 2, r.output
        assert r.output == f"error: no revision {HUGE} in {store.path}\n"
    r = CliRunner().invoke(build_app(), ["agent", "status", "--history", HUGE,
                                         "--state", str(tmp_path / "state")])
    assert r.exit_code == 0 and "pending: revision 2" in r.output, r.output


@pytest.mark.parametrize("value", ["true", '"1"', "1.0", "[1]"])
def test_a_revision_must_be_a_json_integer(svc, value):
    url, store = svc
    store_before = snapshot(store)
    status, body = call(url, "POST", "/api/rollback", f'{{"revision": {value}}}'.encode(), AUTH)
    assert status == 422, body
    assert json.loads(body)["detail"][0]["loc"] == ["body", "revision"]
    assert snapshot(store) == store_before


def test_a_reason_must_be_a_json_string(svc):
    url, store = svc
    for value in ("5", "true", "null"):
        status, _ = call(url, "POST", "/api/freeze", f'{{"reason": {value}}}'.encode(), AUTH)
        assert status == 422
    assert not store.flags().frozen


# -- the store replaced under the running service ------------------------------------------

def _replace(path: Path, make) -> None:
    """Put a new file in place of `path` (as `mv new state.db` does), its WAL files gone."""
    new = path.with_name("new.db")
    make(new)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(new, path)


def test_a_store_replaced_by_something_else_is_503_everywhere(svc):
    url, store = svc
    assert call(url, "GET", "/api/status")[0] == 200  # the status is cached now

    def foreign(p):
        with sqlite3.connect(p) as db:
            db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")

    _replace(store.path, foreign)
    for method, path in [("GET", "/api/status"), ("GET", "/api/revisions"), ("GET", "/"),
                         ("GET", "/metrics"), ("GET", "/api/revisions/1"), ("POST", "/api/freeze")]:
        status, body = call(url, method, path, b"{}" if method == "POST" else None, AUTH)
        assert status == 503, (path, status, body[:200])
        detail = json.loads(body)["detail"]
        assert detail.startswith(f"{store.path} was replaced while the service runs, by a file "
                                 "that is not the agent's store: "), detail
        assert "an SQLite database of something else" in detail and "customers" in detail
    with sqlite3.connect(store.path) as db:  # nothing was created in it
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["customers"]
    # garbage instead of a database: the same
    _replace(store.path, lambda p: p.write_bytes(b"not a database at all" * 100))
    status, body = call(url, "GET", "/api/status")
    assert status == 503 and "not the agent's store" in json.loads(body)["detail"]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_store_overwritten_in_place_is_503_everywhere(svc, damage):
    """Written over in place (same inode: `head -c 40000 /dev/urandom > state.db`, `: >
    state.db`), the store is not followed as a replacement: every endpoint said 500 with a
    traceback in the log. Now each says the same 503 naming the file; putting the store back
    in place recovers the service."""
    url, store = svc
    assert call(url, "GET", "/api/status")[0] == 200
    good = store.path.read_bytes()
    with open(store.path, "r+b") as f:  # the same file, its content gone
        if damage == "garbage":
            f.write(os.urandom(40000))
        f.truncate(0 if damage == "truncated" else None)
    for method, path in [("GET", "/api/status"), ("GET", "/api/revisions"), ("GET", "/"),
                         ("GET", "/metrics"), ("GET", "/api/revisions/1"),
                         ("GET", "/api/outcomes"), ("POST", "/api/revisions/2/approve")]:
        status, body = call(url, method, path, b"{}" if method == "POST" else None, AUTH)
        assert status == 503, (damage, path, status, body[:300])
        detail = json.loads(body)["detail"]
        assert detail.startswith(f"{store.path}: the store cannot be read"), detail
    # the kill switch holds all the same: the stop file, no new store begun in the damaged file
    status, body = call(url, "POST", "/api/freeze", b"{}", AUTH)
    assert status == 200 and json.loads(body)["frozen"] is True, body
    assert (store.state_dir / "STOP").exists()
    assert store.path.stat().st_size == (0 if damage == "truncated" else 40000)
    with open(store.path, "r+b") as f:
        f.write(good)
        f.truncate()
    assert call(url, "GET", "/api/status")[0] == 200


def test_a_store_removed_under_the_service_is_503(svc):
    url, store = svc
    assert call(url, "GET", "/api/status")[0] == 200
    os.replace(store.path, store.path.with_name("moved.db"))
    status, body = call(url, "GET", "/api/status")
    assert (status, json.loads(body)["detail"]) == (
        503, f"{store.path} was removed while the service runs; put the store back, or restart "
             "the service to begin a new one")
    assert not store.path.exists()  # not silently begun anew


def test_a_store_replaced_by_another_agents_store_is_followed(svc, tmp_path):
    url, store = svc
    other = seed(tmp_path / "other")  # revisions 1 and 2 ...
    other.freeze("operator:carol", "the other store")  # ... and frozen
    assert json.loads(call(url, "GET", "/api/status")[1])["frozen"] is False

    def copy(p):
        with sqlite3.connect(other.path) as src, sqlite3.connect(p) as dst:
            src.backup(dst)

    _replace(store.path, copy)
    st = json.loads(call(url, "GET", "/api/status")[1])
    assert (st["frozen"], st["frozen_reason"]) == (True, "the other store")
    status, _ = call(url, "POST", "/api/unfreeze", b"{}", AUTH)
    assert status == 200 and not RevisionStore(store.state_dir).flags().frozen


# -- token files -------------------------------------------------------------------------

def test_a_fifo_token_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "token"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(InputError, match=r"token: is a FIFO \(named pipe\), not a regular file"):
        load_or_create_token(tmp_path / "s", fifo)
    # the state directory's own token file as a FIFO: the same, instead of a hang at start
    seed(tmp_path / "state")
    os.mkfifo(tmp_path / "state" / "service.token", 0o600)
    p = subprocess.run([AUTOSCHED, "agent", "serve", "--state", str(tmp_path / "state"),
                        "--port", "0"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": SRC})
    assert p.returncode == 2
    assert p.stderr == (f"error: {tmp_path / 'state' / 'service.token'}: is a FIFO (named pipe), "
                        "not a regular file; expected a service token file\n")


def test_a_token_file_that_is_not_text_or_too_large_is_one_line(tmp_path):
    bad = tmp_path / "token"
    bad.write_bytes(b"\xff\xfe" + b"x" * 30)
    os.chmod(bad, 0o600)
    with pytest.raises(InputError, match=r"token: not UTF-8 text \(byte 0\); expected a service "
                                         r"token file"):
        load_or_create_token(tmp_path / "s", bad)
    bad.write_bytes(b"x" * 5000)
    with pytest.raises(InputError, match=r"token: larger than 4096 bytes; not a service token"):
        load_or_create_token(tmp_path / "s", bad)


# -- the memory a flood of bodies costs --------------------------------------------------------

def test_unauthenticated_bodies_are_not_read(tmp_path):
    """Six 50 MB bodies without the token (the hostile case that took the service from 106 MB to
    872 MB): each is answered 401 while the body is still being sent, and nothing is kept."""
    store = seed(tmp_path / "state")
    answers: list[bytes] = []
    with serve_in_thread(make_app(tmp_path / "state")) as url:
        host, port = url.removeprefix("http://").split(":")

        def flood() -> None:
            with socket.create_connection((host, int(port)), timeout=30) as s:
                s.sendall(b"POST /api/freeze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                          b"application/json\r\nContent-Length: 50000000\r\n\r\n")
                try:
                    s.sendall(b'{"reason": "' + b"x" * 1_000_000)  # then the server hangs up
                except OSError:
                    pass
                answers.append(s.recv(200))

        threads = [threading.Thread(target=flood) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert len(answers) == 6 and all(a.startswith(b"HTTP/1.1 401 ") for a in answers), answers
    assert not store.flags().frozen


def test_the_store_refuses_a_foreign_database_cli(tmp_path):
    """`agent status` on a state directory whose state.db is another program's database: one
    line, and no table created in it."""
    from typer.testing import CliRunner

    from autosched.cli import build_app

    seed(tmp_path / "state")
    db_path = tmp_path / "state" / "state.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
    r = CliRunner().invoke(build_app(), ["agent", "status", "--state", str(tmp_path / "state")])
    assert r.exit_code == 2
    assert r.output == (f"error: {db_path}: an SQLite database of something else (application "
                        "id 0, tables customers), not the agent's revision store; it is left as "
                        "it is (move it away, or give another state directory)\n")
    with sqlite3.connect(db_path) as db:
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["customers"]
    shutil.rmtree(tmp_path / "state")
