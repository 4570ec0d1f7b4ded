"""Pieces every trace parser shares: the `Format` record, reading text (gzip or not), CSV rows
with line numbers, header checks, and wall-clock times.

Kept apart from `formats.py` (the registry) so that each format's module can import them
without a circular import.
"""

from __future__ import annotations

import calendar
import csv
import gzip
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .report import RowCheck
from .table import TraceError

# What a parser returns: each column as a list (read row by row) or an array (read at array speed).
Columns = Mapping[str, Sequence[Any] | np.ndarray]
# csv.QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC, QUOTE_NONE (the values `csv.reader` takes)
Quoting = Literal[0, 1, 2, 3]


@dataclass(frozen=True)
class Format:
    name: str
    help: str
    detect: Callable[[str], bool]  # gets the first 4 KiB of the file as text
    parse: Callable[[Path, RowCheck], Columns]


def csv_header(head: str, delimiter: str = ",") -> list[str]:
    first = head.splitlines()[0] if head else ""
    return [c.strip().lower() for c in next(csv.reader([first], delimiter=delimiter), [])]


def read_csv_rows(path: Path, delimiter: str = ",", quoting: Quoting = csv.QUOTE_MINIMAL
                  ) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header (lower-cased, each name once) and (line number, cells) per non-blank data row; a
    row's line is the one it starts on (a quoted cell may span lines).

    A quote that is never closed would make the rest of the file one cell of the last row: that
    is an error naming the line the row starts on, not one row read."""
    with open_text(path) as f:
        lines = _Lines(f)
        reader = csv.reader(lines, delimiter=delimiter, quoting=quoting)
        try:
            header = [c.strip().lower() for c in next(reader)]
        except StopIteration:
            raise TraceError(f"{path}: the file is empty (no header row)") from None
        check_header(path, header)
        rows: list[tuple[int, list[str]]] = []
        start, record = reader.line_num + 1, []
        for r in reader:
            if r and "".join(r).strip():
                rows.append((start, r))
            last = start
            start = reader.line_num + 1
            record, lines.record = lines.record, []  # the last record's lines, for the check below
        if len(record) > 1 and _unclosed_quote(record, delimiter, quoting):
            raise TraceError(f"{path}: line {last}: a quote in this row is never closed, so the rest of the "
                             f"file ({len(record):,} lines) would be one cell; close it or remove it")
    return header, rows


class _Lines:
    """A text file's lines as `csv.reader` takes them, keeping those of the record being read."""

    def __init__(self, f: Iterator[str]) -> None:
        self.f = f
        self.record: list[str] = []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = next(self.f)
        self.record.append(line)
        return line


def _unclosed_quote(record: list[str], delimiter: str, quoting: Quoting) -> bool:
    """True when the record's lines end inside a quoted cell: read strictly, the reader runs out
    of lines mid-cell (the lenient reader used for the rows takes the rest of the file as that
    cell)."""
    ended = False

    def feed():
        nonlocal ended
        yield from record
        ended = True

    try:
        for _ in csv.reader(feed(), delimiter=delimiter, quoting=quoting, strict=True):
            pass
    except csv.Error:
        return ended
    return False


def check_header(path: Path, header: Sequence[str], where: str = "line 1 (header)") -> None:
    """A header names each column once: the second of two same-named columns would be ignored
    without a word (empty names, such as the one after sacct's trailing ``|``, are not names)."""
    seen: dict[str, int] = {}
    for i, name in enumerate(header, start=1):
        if name and name in seen:
            raise TraceError(f"{path}: {where}: column {name!r} appears twice (columns {seen[name]} "
                             f"and {i}); name each column once")
        seen.setdefault(name, i)


def found_columns(header: Sequence[str]) -> str:
    """A file's header cells for an error message, which must stay one line: a cell with a line
    break or another unprintable character (a quoted cell may span lines) is shown as its repr,
    and the whole is cut at 200 characters."""
    text = ", ".join(c if c.isprintable() else repr(c) for c in header)
    return text if len(text) <= 200 else text[:200] + "..."


def column_index(path: Path, header: list[str], names: Sequence[str]) -> dict[str, int]:
    missing = [n for n in names if n not in header]
    if missing:
        raise TraceError(
            f"{path}: line 1 (header): missing column(s) {', '.join(missing)}; found {found_columns(header)}"
        )
    return {n: header.index(n) for n in names}


def new_columns(*names: str) -> dict[str, list[Any]]:
    return {n: [] for n in names}


def checked_rows(check: RowCheck, header: list[str], rows: list[tuple[int, list[str]]]
                 ) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) for each row; a row with more or fewer cells than the header cannot
    be trusted, so it is dropped (and recorded) instead."""
    for line, row in rows:
        if len(row) == len(header):
            yield line, row
        else:
            check.drop(f"line {line}", "*", f"row has {len(row)} cells, header has {len(header)}")


# ----------------------------------------------------------------------------- wall-clock times

# Traces give local times without a zone. They are read as naive wall-clock times (UTC
# arithmetic, no daylight-saving shifts), so the result is the same on every machine.
WALLCLOCK_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")


_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T]([01]\d|2[0-3]):([0-5]\d):([0-5]\d)")


def wallclock_seconds(text: str) -> int | None:
    """Seconds since 1970 of ``YYYY-MM-DD HH:MM:SS`` (or with ``T``); None if it is not one."""
    text = text.strip()
    m = _STAMP.fullmatch(text)
    if m:  # the common case, ten times faster than strptime (a full Philly trace has 100k stamps)
        day = _day_start(int(m[1]), int(m[2]), int(m[3]))
        return None if day is None else day + int(m[4]) * 3600 + int(m[5]) * 60 + int(m[6])
    for fmt in WALLCLOCK_FORMATS:
        try:
            return calendar.timegm(datetime.strptime(text, fmt).timetuple())
        except ValueError:
            continue
    return None


@lru_cache(maxsize=4096)
def _day_start(year: int, month: int, day: int) -> int | None:
    try:
        return calendar.timegm(datetime(year, month, day).timetuple())
    except ValueError:  # e.g. 2017-02-30
        return None


def from_first_day(stamps: Sequence[int]) -> list[float]:
    """Times counted from 00:00 of the first stamp's day, so ``t % 86400`` is the time of day."""
    t0 = min(stamps) // 86400 * 86400 if stamps else 0
    return [float(s - t0) for s in stamps]


# ----------------------------------------------------------------------------------- raw files


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_text(path: Path):
    """Open a text file, gzip-compressed or not (by its first bytes)."""
    if is_gzip(path):
        return gzip.open(path, "rt", newline="", encoding="utf-8-sig")
    return open(path, newline="", encoding="utf-8-sig")


def head_bytes(path: Path, size: int = 4096) -> bytes:
    """The first bytes of the (decompressed) file."""
    with open(path, "rb") as f:
        raw = f.read(size)
    if raw[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as f:
            raw = f.read(size)
    return raw
