"""Device nodes of a test's own, for tests of what a command does when an output is one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


def own_null_device(path: Path) -> Path:
    """A character device node of our own (the null device's numbers), as `mknod x.csv c 1 3`.

    Never a link to the real /dev/null: code with the bug under test would replace /dev/null
    itself with a regular file, for every process on the machine."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")
    return path
