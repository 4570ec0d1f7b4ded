"""Memory of the agent's HTTP service under large request bodies.

    PYTHONPATH=src .venv/bin/python benchmarks/service_bodies.py                # 6 x 50 MB, no token
    PYTHONPATH=src .venv/bin/python benchmarks/service_bodies.py --parallel       # all 6 at once
    PYTHONPATH=src .venv/bin/python benchmarks/service_bodies.py --token --count 6 --mb 50
    PYTHONPATH=src .venv/bin/python benchmarks/service_bodies.py --src /path/to/other/src

Makes a state directory in a temporary folder (an agent on the fake connector, one proposal
open), starts `autosched agent serve --port 0` on it in its own process (with `--src`, that tree's
code), reads the service's resident memory (VmRSS and its peak VmHWM, /proc/PID/status), then sends
`--count` POST /api/freeze requests, one after another (or all at once: `--parallel`), each with a `{"reason": "xxx..."}` body of
`--mb` MB (without the token, or with it: `--token`), sends every byte the server reads, and
prints each answer's status and length and the memory after them. The service is stopped by its
pid at the end.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from autosched.service.serve import serve_in_process  # noqa: E402

TOKEN = "benchmark-token-0123456789"


def seed(state: Path, src: str) -> None:
    """tests/service_kit.py's demo agent in `state`, made by the code in `src` (whose service
    will serve it: a newer store's schema would be refused by an older service)."""
    code = (f"import sys; sys.path[:0] = [{src!r}, {str(ROOT / 'tests')!r}]; "
            f"from pathlib import Path; from service_kit import seed; seed(Path({str(state)!r}))")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": src})


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of process `pid` in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def post(host: str, port: int, mb: float, token: bool) -> tuple[str, int]:
    """One POST of an `mb` MB JSON body; (the status line, bytes of the answer)."""
    body = b'{"reason": "' + b"x" * int(mb * 1e6) + b'"}'
    head = (f"POST /api/freeze HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
            + (f"Authorization: Bearer {TOKEN}\r\n" if token else "") + "\r\n").encode()
    with socket.create_connection((host, port), timeout=300) as s:
        s.sendall(head)
        try:
            view = memoryview(body)
            for i in range(0, len(body), 1 << 20):
                s.sendall(view[i:i + (1 << 20)])
        except OSError:
            pass  # the service answered and hung up before the whole body: it did not read it
        answer = b""
        while True:
            try:
                chunk = s.recv(1 << 20)
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode(errors="replace"), len(answer)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=6)
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--token", action="store_true", help="send the token (default: none)")
    ap.add_argument("--parallel", action="store_true", help="send them all at once")
    ap.add_argument("--src", default=str(ROOT / "src"), help="source tree the service runs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        seed(state, args.src)
        token = Path(tmp) / "token"
        token.write_text(TOKEN)
        os.chmod(token, 0o600)
        with serve_in_process(state, "--token-file", str(token), src=args.src) as (url, proc):
            host, port = url.removeprefix("http://").split(":")
            time.sleep(1.0)
            rss, hwm = memory(proc.pid)
            print(f"service {args.src}: VmRSS {rss:.0f} MB at start")
            def one(i: int) -> None:
                t0 = time.perf_counter()
                status, size = post(host, int(port), args.mb, args.token)
                print(f"POST {i + 1}: {args.mb:g} MB {'with' if args.token else 'without'} the "
                      f"token -> {status}, answer {size} bytes, {time.perf_counter() - t0:.1f} s",
                      flush=True)

            if args.parallel:
                threads = [threading.Thread(target=one, args=(i,)) for i in range(args.count)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            else:
                for i in range(args.count):
                    one(i)
            time.sleep(1.0)
            rss, hwm = memory(proc.pid)
            print(f"after {args.count} POSTs: VmRSS {rss:.0f} MB, peak VmHWM {hwm:.0f} MB")


if __name__ == "__main__":
    main()
