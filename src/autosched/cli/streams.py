"""Standard output and standard error of one ``autosched`` run, and what happens when they fail.

- **stdout** carries results (``-`` outputs, ``--json``, tables). A write that fails (``> /dev/full``,
  a closed stdout) is an `OutputError` ("standard output: cannot write (No space left on
  device)"): the command stops with that one line and exit code 2, as for any output file. A
  reader that stops early (``| head``) is not an error: Python's `BrokenPipeError` goes on as
  before.
- **stderr** carries drop reports, notes and errors. A message that cannot be written there
  (stderr closed with ``2>&-``, or full) is not lost in silence: the run's exit code becomes 2
  (if it was 0), since what was dropped from a trace is part of the result.

A closed descriptor (``>&-``, ``2>&-``) is first pointed at ``/dev/null``: otherwise the next file
opened would take its number, and stderr text would be written into that file.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TextIO

from ..atomic import OutputError


class _Raw(io.RawIOBase):
    """Descriptor `fd` with its stream's rule for a write that fails: stdout (`strict`) raises
    one `OutputError`, stderr records that text was lost. Either way, later writes are dropped
    (the buffer's last flush at exit must not fail again)."""

    def __init__(self, fd: int, name: str, strict: bool, closed: bool = False):
        super().__init__()
        self.fd, self.name, self.strict = fd, name, strict
        self.why = "it is closed" if closed else ""  # set once a write cannot be done
        self.lost = False  # text was dropped
        self.said = False  # stdout: its OutputError was raised

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return not self.why and os.isatty(self.fd)

    def write(self, data) -> int:  # type: ignore[override]
        size = len(memoryview(data))
        if not self.why:
            try:
                return os.write(self.fd, data)
            except BrokenPipeError:
                if self.strict:
                    raise  # stdout's reader stopped early (`| head`): handled as before
                self.why = "broken pipe"
            except OSError as e:
                self.why = e.strerror or str(e)
        self.lost = self.lost or size > 0
        if self.strict and self.lost and not self.said:
            self.said = True
            raise OutputError(f"{self.name}: cannot write ({self.why})")
        return size


class Streams:
    """stdout and stderr of this process, replaced by guarded ones (`guard`)."""

    def __init__(self) -> None:
        self.out = self._replace(1, "stdout", "standard output", strict=True)
        self.err = self._replace(2, "stderr", "standard error", strict=False)

    @staticmethod
    def _replace(fd: int, attr: str, name: str, strict: bool) -> _Raw:
        old: TextIO | None = getattr(sys, attr)
        closed = _closed(fd)
        if closed:  # keep the number taken, so that no file opened later gets it
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        raw = _Raw(fd, name, strict, closed=closed)
        tty = not closed and os.isatty(fd)
        text = io.TextIOWrapper(io.BufferedWriter(raw), encoding=getattr(old, "encoding", None) or "utf-8",
                                errors=getattr(old, "errors", None) or "strict",
                                line_buffering=tty or not strict, write_through=not strict)  # stderr as Python's
        setattr(sys, attr, text)
        return raw

    def finish(self, code: int | str | None) -> int | str | None:
        """The exit code, after the last of stdout is written: 2 when that write fails (said in
        one line) or when stderr lost a message."""
        try:
            sys.stdout.flush()
        except OutputError as e:
            print(f"error: {e}", file=sys.stderr)
            code = 2
        except BrokenPipeError:  # the reader stopped early: not an error (the rest goes nowhere)
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.out.fd)
        if self.err.lost and code in (0, None):
            code = 2
        return code


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def guard() -> Streams:
    """Replace ``sys.stdout`` and ``sys.stderr`` with guarded streams on descriptors 1 and 2."""
    for s in (sys.stdout, sys.stderr):
        if s is not None:
            try:
                s.flush()
            except OSError:
                pass
    return Streams()
