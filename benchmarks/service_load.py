"""Load check of the agent's HTTP service: many clients reading the status at once.

    .venv/bin/python benchmarks/service_load.py                 # 50 clients, 30 s
    .venv/bin/python benchmarks/service_load.py --url http://127.0.0.1:8750 --clients 50

Without --url it makes a state directory in a temporary folder (an agent on the fake connector,
30 revisions made through its actions, with evidence and outcomes, one proposal open), starts
`autosched agent serve --port 0` on it as an operator would, and stops that process by its pid at
the end. Each client holds one keep-alive HTTP/1.1 connection and sends GET /api/status back to
back; the clients are asyncio tasks in this one process, so the load generator itself stays small
beside the service on a small machine. Prints requests/s, latency percentiles and the number of
failed requests (any status other than 200, a timeout or a broken connection).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from autosched.service.serve import serve_in_process  # noqa: E402


def _autosched() -> str:
    return str(Path(sys.executable).with_name("autosched"))


async def client(host: str, port: int, path: str, until: float, lat: list[float],
                 fails: list[str], timeout: float) -> None:
    reader = writer = None
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n\r\n"
    while time.perf_counter() < until:
        t0 = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                        timeout)
            writer.write(request.encode())
            status, body = await asyncio.wait_for(_response(reader), timeout)
            if status != 200:
                fails.append(f"HTTP {status}")
            else:
                json.loads(body)
                lat.append(time.perf_counter() - t0)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
            fails.append(type(e).__name__)
            if writer is not None:
                writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                  if k.lower() == "content-length")
    return status, await reader.readexactly(length)


async def run(url: str, clients: int, seconds: float, timeout: float) -> dict[str, float]:
    u = urlsplit(url)
    lat: list[float] = []
    fails: list[str] = []
    start = time.perf_counter()
    until = start + seconds
    await asyncio.gather(*(client(u.hostname, u.port or 80, "/api/status", until, lat, fails,
                                  timeout) for _ in range(clients)))
    wall = time.perf_counter() - start
    lat.sort()
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [0.0] * 99
    return {"requests": len(lat) + len(fails), "ok": len(lat), "failures": len(fails),
            "failure_kinds": sorted(set(fails)), "seconds": wall,
            "requests_per_s": len(lat) / wall, "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
            "max_ms": (lat[-1] if lat else 0.0) * 1e3}


def make_state(state: Path) -> None:
    """An agent state dir with a history worth reading: 30 revisions, outcomes, a proposal."""
    sys.path.insert(0, str(ROOT / "src"))
    from autosched.live.agent import open_agent
    from autosched.live.fake import FakeConnector
    from autosched.live.records import Evidence, JudgedOutcome

    FakeConnector.create(state.parent / "fake")
    subprocess.run([_autosched(), "agent", "init", "--state", str(state), "--fake",
                    str(state.parent / "fake")], check=True, capture_output=True, text=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    agent = open_agent(state)
    s = agent.store
    cfg = agent.view.running_or_baseline().config
    for i in range(29):  # 28 applied through the agent (each judged), one left proposed
        cfg = {**cfg, "PriorityWeightAge": 1000 + 250 * (i + 1)}
        r = s.create(cfg, trigger="period", actor="agent:propose", parent=s.running().id,
                     evidence=Evidence(predicted_gain=0.02 + 0.001 * i, spread=0.01, samples=3))
        if i < 28:
            agent.approve(r.id, "operator:bench")
            s.record_outcome(r.id, JudgedOutcome("avg_jct", {}, {}, r.evidence.predicted_gain, "kept",
                                                 0.015 + 0.001 * i))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="an already running service (default: start one)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=10.0, help="per request, seconds")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="autosched-load-") as tmp, ExitStack() as stack:
        url = args.url
        if url is None:
            state = Path(tmp) / "state"
            make_state(state)
            url, _ = stack.enter_context(serve_in_process(state, src=str(ROOT / "src")))
        res = asyncio.run(run(url, args.clients, args.seconds, args.timeout))
    print(f"{args.clients} clients, GET /api/status for {res['seconds']:.1f} s on {url}")
    print(f"requests/s {res['requests_per_s']:.0f}  p50 {res['p50_ms']:.1f} ms  "
          f"p99 {res['p99_ms']:.1f} ms  max {res['max_ms']:.1f} ms")
    print(f"requests {res['requests']}  ok {res['ok']}  failures {res['failures']}"
          + (f" ({', '.join(res['failure_kinds'])})" if res["failures"] else ""))
    sys.exit(1 if res["failures"] else 0)


if __name__ == "__main__":
    main()
