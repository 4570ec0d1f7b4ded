"""The service and the command line acting on one state directory at the same time, as real
processes: one approve wins and every other gets a refusal saying why, reads never fail while
writes go on, and the SQLite store stays whole."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from autosched.client import Client
from autosched.live.records import RevisionState
from service_kit import AUTOSCHED, SRC, TOKEN, live_values, seed, serve_process

ROUNDS = 15  # freeze/unfreeze pairs per writer

HTTP_WORKER = textwrap.dedent("""
    import json, sys
    from autosched.client import Client, Conflict
    c = Client(sys.argv[1], token=sys.argv[2])
    out = {"approve": None, "flags": 0}
    if sys.argv[3] == "approve":
        try:
            c.approve(2, operator="http")
            out["approve"] = "ok"
        except Conflict as e:
            out["approve"] = str(e)
    else:
      for _ in range(int(sys.argv[3])):
        c.freeze("load", operator="http"); c.unfreeze(operator="http"); out["flags"] += 2
    print(json.dumps(out))
""")

READER = textwrap.dedent("""
    import json, sys, time
    from autosched.client import Client
    c = Client(sys.argv[1])
    n = fails = 0
    stop = time.monotonic() + 120
    while not __import__("os").path.exists(sys.argv[2]) and time.monotonic() < stop:
        for call in (c.status, c.revisions, c.outcomes):
            try:
                call(); n += 1
            except Exception as e:
                fails += 1; print(repr(e), file=sys.stderr)
    print(json.dumps({"reads": n, "failures": fails}))
""")

def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC}


def cli(state: Path, *args: str) -> subprocess.Popen:
    """`autosched agent ARGS --state STATE` as an operator on the controller host runs it."""
    return subprocess.Popen([AUTOSCHED, "agent", *args, "--state", str(state),
                             "--actor", "operator:cli"],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cli_and_service_at_once(tmp_path):
    state = tmp_path / "state"
    seed(state)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    os.chmod(token_file, 0o600)
    stop = tmp_path / "stop"
    with serve_process(state, "--token-file", str(token_file)) as (url, _):
        py = [sys.executable, "-c"]
        readers = [subprocess.Popen(py + [READER, url, str(stop)], env=_env(), text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                   for _ in range(2)]

        def http(what: str) -> subprocess.Popen:
            return subprocess.Popen(py + [HTTP_WORKER, url, TOKEN, what], env=_env(),
                                    text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        # 1: three operators approve through the service and three on the command line, at once
        racing = [http("approve") for _ in range(3)]
        approvers = [cli(state, "approve", "2") for _ in range(3)]
        results = [json.loads(p.communicate(timeout=300)[0]) for p in racing]
        approved_cli = [p.wait(120) for p in approvers]
        # 2: freeze/unfreeze through both at once, reads going on all along
        churn = [http(str(ROUNDS)) for _ in range(2)]
        flaggers = []
        for _ in range(ROUNDS):
            for kind in ("freeze", "unfreeze"):
                p = cli(state, kind, *(["--reason", "cli"] if kind == "freeze" else []))
                flaggers.append(p)
                p.wait(120)
        churned = [json.loads(p.communicate(timeout=300)[0]) for p in churn]
        stop.touch()
        reads = [json.loads(p.communicate(timeout=120)[0]) for p in readers]
        # what the command line did shows in the service's status at once
        cli(state, "freeze", "--reason", "from the shell").wait(120)
        st = Client(url).status()
        assert (st["running"]["id"], st["frozen"], st["frozen_reason"], st["frozen_by"]) == (
            2, True, "from the shell", "operator:cli")
        cli(state, "unfreeze").wait(120)
        assert Client(url).status()["frozen"] is False

    assert all(p.returncode == 0 for p in flaggers)
    assert all(r["failures"] == 0 and r["reads"] > 0 for r in reads), reads
    db = sqlite3.connect(state / "state.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    n_flags = db.execute("SELECT COUNT(*) FROM flags WHERE kind IN ('freeze', 'unfreeze')"
                         ).fetchone()[0]
    assert n_flags == sum(r["flags"] for r in churned) + 2 * ROUNDS + 2 == 6 * ROUNDS + 2
    events = [e for (e,) in db.execute("SELECT state FROM events WHERE rev_id = 2 ORDER BY seq")]
    db.close()
    from autosched.live.store import RevisionStore

    s = RevisionStore(state)
    assert s.running().id == 2 and s.running().state is RevisionState.APPLIED
    assert s.pending() is None and not s.flags().frozen
    assert live_values(state)["PriorityWeightAge"] == "5000"

    # Last, the approve race: exactly one approve wins (the store checks that the revision is
    # still proposed in the transaction that begins the apply); every other is refused saying
    # why: it came after the winner or met the winner's apply still running. One that read the
    # store just before the winner's commit must say so too, not call the winner's change a
    # hand edit or a stale proposal.
    refusals = [r["approve"] for r in results if r["approve"] != "ok"]
    refusals += [p.stderr.read() for p, code in zip(approvers, approved_cli) if code]
    assert 6 - len(refusals) == 1 and events == ["proposed", "applied"], (
        results, approved_cli, events)
    refused = re.compile(
        r"^(HTTP 409|error): (revision 2 is applied; only a proposed revision can be "
        r"(approved|applied)|revision 2 is being applied by pid \d+ right now)")
    assert all(refused.search(r) for r in refusals), refusals
