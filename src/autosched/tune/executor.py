"""Where trials run: in this process, in local worker processes, or on Ray.

Every executor has the same small interface, so the tuner's loop is one code path:
``submit(key, policy, config)`` starts a trial, ``collect()`` blocks until at least one trial is
over and returns its `TrialRun`\\ s. A trial that raises, or runs past ``trial_timeout`` seconds,
comes back as an error (the search goes on); a trial whose worker died is retried once.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Mapping, Sized
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, Literal, NoReturn, Protocol

from ..space import Config
from .config import EXECUTORS, TuneError
from .evaluate import ConfigScore, Evaluator

MAX_ATTEMPTS = 2  # a dead worker's trial is retried once


@dataclass(frozen=True)
class TrialRun:
    """One trial as an executor ran it: its key, its score (None when it failed), why it failed,
    how long it took and how many times it was started."""

    key: int
    evaluation: ConfigScore | None
    error: str | None
    duration: float
    attempts: int = 1


class Executor(Protocol):
    """Where the tuner's trials run (see the module docstring)."""

    workers: int

    def start(self, evaluator: Evaluator) -> None: ...
    def submit(self, key: int, policy: str, config: Mapping[str, Any]) -> None: ...
    def collect(self) -> list[TrialRun]: ...
    def close(self) -> None: ...


class TrialTimeout(Exception):
    """Internal control flow, not a project error: `_alarm` raises it inside `run_trial`, which
    alone arms the alarm and catches it (the alarm is disarmed inside the ``try``), so it never
    reaches a caller; the trial comes back as a "ran past the timeout" message instead."""


def run_trial(evaluator: Evaluator, policy: str, config: Mapping[str, Any],
              timeout: float | None = None) -> tuple[ConfigScore | None, str | None]:
    """Score a config, turning any exception into an error message (the trial fails, not the run).
    With `timeout`, a trial still running after that many seconds is stopped (SIGALRM: main thread
    only, see `_alarm`)."""
    try:
        with _alarm(timeout):
            return evaluator(policy, config), None
    except TrialTimeout as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - a failing trial must never stop the search
        return None, f"{type(e).__name__}: {e}"


def _error_with_origin(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


class InProcessExecutor:
    """Runs each trial in this process (workers=1). The timeout uses SIGALRM on the main thread."""

    workers = 1

    def __init__(self, trial_timeout: float | None = None):
        self.trial_timeout = trial_timeout
        self._queue: list[tuple[int, str, Config]] = []

    def start(self, evaluator: Evaluator) -> None:
        self.evaluator = evaluator

    def submit(self, key: int, policy: str, config: Mapping[str, Any]) -> None:
        self._queue.append((key, policy, dict(config)))

    def collect(self) -> list[TrialRun]:
        key, policy, config = self._queue.pop(0)
        t0 = time.perf_counter()
        evaluation, error = run_trial(self.evaluator, policy, config, self.trial_timeout)
        return [TrialRun(key, evaluation, error, time.perf_counter() - t0)]

    def close(self) -> None:
        self._queue.clear()


class _alarm:
    """Raise TrialTimeout in the main thread after `seconds` (no-op elsewhere or without a limit)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds or 0.0
        self.armed = bool(seconds) and threading.current_thread() is threading.main_thread() \
            and hasattr(signal, "setitimer")

    def _fire(self, signum: int, frame: FrameType | None) -> NoReturn:
        raise TrialTimeout(f"trial ran past the {self.seconds:g} s timeout")

    def __enter__(self) -> _alarm:
        if self.armed:
            self._old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
        return False


# ------------------------------------------------------------------------- local processes

_EVALUATOR: Evaluator | None = None  # the evaluator a forked child inherits


def _die_with(parent: int) -> None:
    """End this worker when its parent dies (Linux): a tuning run killed with SIGKILL must not
    leave its trials running on, unseen, on a shared machine."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the worker ends at its trial's end instead
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _child(conn: Connection, policy: str, config: Config, parent: int) -> None:
    # Set the inherited objects aside from this worker's collector: a full collection walks every
    # object and writes to its GC header, which copies each page it lands on. After a long run
    # (the README's, after autosched and last_period) the parent's objects are spread over
    # hundreds of MB, and that copying doubled the oracles' CPU time (benchmarks/strategy_cost.py;
    # docs/history.md, "the main job's time"). Freezing relinks the generation lists (O(1)) and leaves the
    # parent's collector as it was.
    gc.freeze()
    _die_with(parent)
    os.environ["OMP_NUM_THREADS"] = "1"  # one BLAS thread per worker: cores are shared
    try:
        if _EVALUATOR is None:
            raise RuntimeError("the worker was forked before ProcessExecutor.start")
        result = run_trial(_EVALUATOR, policy, config)
    except BaseException as e:  # noqa: BLE001
        result = (None, _error_with_origin(e))
    conn.send(result)
    conn.close()


@dataclass
class _Running:
    key: int
    policy: str
    config: Config
    process: BaseProcess
    conn: Connection
    started: float
    attempts: int


class _Pool:
    """Trials wait, in order, for one of `workers` slots; a subclass says how to launch one and
    keeps what runs in `_running`. A trial whose worker died goes back to the front, once."""

    workers: int
    _running: Sized

    def __init__(self) -> None:
        self._waiting: list[tuple[int, str, Config, int]] = []  # (key, policy, config, attempt)

    def submit(self, key: int, policy: str, config: Mapping[str, Any]) -> None:
        self._waiting.append((key, policy, dict(config), 1))
        self._launch()

    def _launch(self) -> None:
        while self._waiting and len(self._running) < self.workers:
            self._launch_one(*self._waiting.pop(0))

    def _launch_one(self, key: int, policy: str, config: Config, attempts: int) -> None:
        raise NotImplementedError


class ProcessExecutor(_Pool):
    """Up to `workers` trials at a time, each in its own forked process.

    A process per trial costs a fork (milliseconds next to a simulation) and makes the rules
    simple: a trial past its timeout is killed, and a process that dies without answering (killed,
    out of memory) is detected by its exit and its trial is retried once.
    """

    def __init__(self, workers: int, trial_timeout: float | None = None):
        import multiprocessing as mp

        if workers < 1:  # ExecutionConfig checks this too, but ProcessExecutor is public on its own
            raise TuneError(f"workers must be at least 1 (got {workers})")
        self.workers = workers
        self.trial_timeout = trial_timeout
        self._ctx = mp.get_context("fork")
        self._running: list[_Running] = []
        super().__init__()

    def start(self, evaluator: Evaluator) -> None:
        global _EVALUATOR
        _EVALUATOR = evaluator

    def _launch_one(self, key: int, policy: str, config: Config, attempts: int) -> None:
        recv, send = self._ctx.Pipe(duplex=False)
        p = self._ctx.Process(target=_child, args=(send, policy, config, os.getpid()), daemon=True)
        p.start()
        send.close()
        self._running.append(_Running(key, policy, config, p, recv, time.perf_counter(), attempts))

    def collect(self) -> list[TrialRun]:
        from multiprocessing.connection import wait

        if not self._running and not self._waiting:
            return []
        while True:
            self._launch()
            timeout = self._next_deadline()
            ready = wait([r.conn for r in self._running] + [r.process.sentinel for r in self._running],
                         timeout=timeout)
            done = self._reap(set(ready))
            if done:
                self._launch()
                return done

    def _next_deadline(self) -> float | None:
        if not self.trial_timeout:
            return None
        now = time.perf_counter()
        return max(0.0, min(r.started + self.trial_timeout - now for r in self._running))

    def _reap(self, ready: set[object]) -> list[TrialRun]:
        out: list[TrialRun] = []
        now = time.perf_counter()
        for r in list(self._running):
            elapsed = now - r.started
            if r.conn in ready or r.conn.poll():
                try:
                    evaluation, error = r.conn.recv()
                except (EOFError, OSError):
                    evaluation, error = None, None  # died mid-send: treat as a dead worker
                if evaluation is not None or error is not None:
                    self._finish(r)
                    out.append(TrialRun(r.key, evaluation, error, elapsed, r.attempts))
                    continue
            if self.trial_timeout and elapsed >= self.trial_timeout:
                r.process.kill()
                self._finish(r)
                out.append(TrialRun(r.key, None, f"trial ran past the {self.trial_timeout:g} s timeout",
                                   elapsed, r.attempts))
            elif r.process.sentinel in ready or not r.process.is_alive():
                r.process.join()
                self._finish(r)
                code = r.process.exitcode
                if r.attempts < MAX_ATTEMPTS:
                    self._waiting.insert(0, (r.key, r.policy, r.config, r.attempts + 1))
                else:
                    out.append(TrialRun(r.key, None, f"worker died twice (exit code {code})", elapsed, r.attempts))
        return out

    def _finish(self, r: _Running) -> None:
        self._running.remove(r)
        r.conn.close()
        if r.process.is_alive():
            r.process.kill()
        r.process.join()

    def close(self) -> None:
        for r in list(self._running):
            self._finish(r)
        self._waiting.clear()


# ------------------------------------------------------------------------------------ Ray

class RayExecutor(_Pool):
    """Trials as Ray tasks (``pip install autosched[ray]``). ``address=None`` starts a local Ray
    instance with `workers` CPUs; otherwise it joins the cluster at `address`."""

    def __init__(self, workers: int, trial_timeout: float | None = None, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise TuneError("the Ray executor needs Ray, which is not installed: pip install 'autosched[ray]'") from None
        self.ray = ray
        self.workers = workers
        self.trial_timeout = trial_timeout
        self.address = address
        # Ray's object refs (Ray has no type information) -> (key, policy, config, submitted, attempts)
        self._running: dict[Any, tuple[int, str, Config, float, int]] = {}
        super().__init__()
        self._started_ray = False
        # Past this (from submission) a task is cancelled from here; normally the task's own alarm
        # ends it after trial_timeout seconds of running.
        self._hard_limit = 2 * trial_timeout + 60 if trial_timeout else None

    def start(self, evaluator: Evaluator) -> None:
        ray = self.ray
        if not ray.is_initialized():
            if self.address:
                check_ray_address(self.address)
            kw = {"address": self.address} if self.address else {"num_cpus": self.workers}
            ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR", **kw)
            self._started_ray = True
        self._ref = ray.put(evaluator)
        # max_retries=0: a dead worker's retry is ours (once), so local and Ray behave alike.
        self._task = ray.remote(num_cpus=1, max_retries=0)(_ray_trial)

    def _launch_one(self, key: int, policy: str, config: Config, attempts: int) -> None:
        ref = self._task.remote(self._ref, policy, config, self.trial_timeout)
        self._running[ref] = (key, policy, config, time.perf_counter(), attempts)

    def collect(self) -> list[TrialRun]:
        ray = self.ray
        hard = self._hard_limit
        while self._running or self._waiting:
            self._launch()
            timeout = None
            if hard is not None:
                now = time.perf_counter()
                timeout = max(0.0, min(v[3] + hard - now for v in self._running.values()))
            ready, _ = ray.wait(list(self._running), num_returns=1, timeout=timeout)
            out = []
            now = time.perf_counter()
            for ref in ready:
                key, policy, config, t0, attempts = self._running.pop(ref)
                try:
                    evaluation, error = ray.get(ref)
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.ActorDiedError) as e:
                    if attempts < MAX_ATTEMPTS:
                        self._waiting.insert(0, (key, policy, config, attempts + 1))
                        continue
                    evaluation, error = None, f"worker died twice ({type(e).__name__})"
                except ray.exceptions.RayError as e:
                    evaluation, error = None, f"{type(e).__name__}: {e}"
                out.append(TrialRun(key, evaluation, error, now - t0, attempts))
            if hard is not None:
                for ref, (key, policy, config, t0, attempts) in list(self._running.items()):
                    if now - t0 >= hard:  # the task's own alarm did not fire: hung
                        ray.cancel(ref, force=True)
                        del self._running[ref]
                        out.append(TrialRun(key, None, f"trial ran past the {self.trial_timeout:g} s timeout",
                                           now - t0, attempts))
            if out:
                self._launch()
                return out
        return []

    def close(self) -> None:
        for ref in list(self._running):
            self.ray.cancel(ref, force=True)
        self._running.clear()
        self._waiting.clear()
        if self._started_ray:
            self.ray.shutdown()


def _ray_trial(evaluator: Evaluator, policy: str, config: Config,
               timeout: float | None) -> tuple[ConfigScore | None, str | None]:
    os.environ["OMP_NUM_THREADS"] = "1"
    # The timeout runs inside the task: a task may wait for a worker (and its imports) for a
    # while, which must not count against the trial.
    return run_trial(evaluator, policy, config, timeout)


def check_ray_address(address: str, timeout: float = 5.0) -> None:
    """Refuse, with a `TuneError`, a Ray address (``HOST:PORT`` or ``ray://HOST:PORT``) where
    nothing listens. ``ray.init`` would wait about a minute and then end the whole process with
    ``SystemExit(15)``; ``auto`` (Ray finds its own cluster) is left to Ray."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise TuneError(f"Ray address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise TuneError(f"Ray address {address!r}: nothing answers there ({e.strerror or e})") from None


def make_executor(kind: str, workers: int, trial_timeout: float | None = None,
                  address: str | None = None) -> Executor:
    if kind == "ray":
        return RayExecutor(workers, trial_timeout, address)
    if kind != "local":
        raise TuneError(f"executor {kind!r}: use one of {', '.join(EXECUTORS)}")  # as ExecutionConfig says
    if workers == 1 and not (trial_timeout and threading.current_thread() is not threading.main_thread()):
        return InProcessExecutor(trial_timeout)  # SIGALRM timeouts work on the main thread only
    return ProcessExecutor(workers, trial_timeout)
