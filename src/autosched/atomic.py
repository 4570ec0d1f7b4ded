"""Every file autosched writes goes through here, under one rule for outputs (and `check_input`
says which inputs can be read: regular files only):

- a write replaces the file whole or not at all: a write that fails midway (or is killed) leaves
  the file that was there before;
- only regular files are written: an existing directory, device, FIFO or socket at the output path
  is refused, never replaced (a symbolic link is written through, so a link to ``/dev/null`` is
  refused too);
- an output never overwrites an input of the same command (the trace, the config, the model, the
  study...): a command declares its inputs with `protect_inputs`, and every write checks them;
- ``-`` is standard output only where a command streams one output (`is_stdout`); elsewhere it is
  refused rather than written as a file named ``-``;
- a path that ends in ``/`` names a directory and is refused, not written as a file of that name
  (an option parsed with `output_path` keeps the ``/`` that `pathlib` drops);
- errors name the user's path, never the temporary file;
- a killed write leaves ``.NAME.PID@HOST.XXXX.tmp`` beside the target; the next write to the same
  target removes it once process PID is gone (on this host).
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from .errors import InputError


class OutputError(InputError, OSError):
    """An output that cannot or must not be written (not a regular file, an input of the same
    command, no permission, no space). An `OSError` too, for callers that catch that."""


# The inputs of the command being run, as (real path, (device, inode) or None); set per command
# by `output_scope` (the CLI opens one around every command).
_INPUTS: ContextVar[tuple[tuple[str, tuple[int, int] | None], ...]] = ContextVar("autosched_inputs", default=())


@contextmanager
def output_scope() -> Iterator[None]:
    """A fresh set of protected inputs for one command; `protect_inputs` adds to it."""
    token = _INPUTS.set(())
    try:
        yield
    finally:
        _INPUTS.reset(token)


def protect_inputs(*paths: str | os.PathLike | None) -> None:
    """Declare files this command reads: no output of the same command may overwrite them.

    ``None`` and ``-`` are skipped, so options can be passed as they are."""
    added = []
    for p in paths:
        if p is None or is_stdout(p):
            continue
        real = os.path.realpath(p)
        try:
            st = os.stat(real)
            ident = (st.st_dev, st.st_ino)
        except OSError:
            ident = None
        added.append((real, ident))
    _INPUTS.set(_INPUTS.get() + tuple(added))


def is_stdout(path: str | os.PathLike) -> bool:
    """``-``: the output goes to standard output (only where a command streams one output)."""
    return os.fspath(path) == "-"


class _TypedPath(type(Path())):  # type: ignore[misc]
    """A `Path` that remembers the text it was typed as (see `output_path`)."""

    typed: str = ""


def output_path(text: str) -> Path:
    """An output path as typed on the command line (a typer ``parser=`` for output options):
    a `Path` that remembers a trailing ``/``, which `Path` itself drops, so that `check_output`
    refuses ``--out adir/`` instead of writing a file named ``adir``."""
    path = _TypedPath(text)
    path.typed = text
    return path


def check_output(path: str | os.PathLike) -> Path:
    """The real path to write `path` to, after checking the rule for outputs; raises `OutputError`
    naming `path`. Commands call it before their work, so a bad output fails at once."""
    shown = getattr(path, "typed", "") or os.fspath(path)
    if is_stdout(path):
        raise OutputError("'-' (standard output) is not accepted for this output; give a file name")
    if shown.endswith(("/", os.sep)):
        raise OutputError(f"{shown}: ends in '/', so it names a directory; give the name of the file to write")
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{shown}: cannot write ({e.strerror})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(f"{shown}: is {_kind(st.st_mode)}, not a regular file; autosched writes only regular files")
    for inp, ident in _INPUTS.get():
        if real == inp or (st is not None and ident == (st.st_dev, st.st_ino)):
            raise OutputError(f"{shown}: is an input of this command; refusing to overwrite it")
    return Path(real)


def check_input(path: str | os.PathLike, what: str = "file") -> None:
    """Refuse, with an `InputError` naming `path`, an input that is missing or not a regular file:
    a FIFO or device would block or never end, a directory cannot be read as `what`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{os.fspath(path)}: no such file") from None
    except OSError as e:
        raise InputError(f"{os.fspath(path)}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{os.fspath(path)}: is {_kind(st.st_mode)}, not a regular file; expected a {what}")


def real_path(path: str | os.PathLike) -> Path:
    """`path` made absolute with its symbolic links resolved, for a setting that outlives the
    command (a path saved in a state directory); a path that may not exist yet is allowed, one
    that cannot be looked up (a symbolic link loop, no permission) is an `InputError` naming it."""
    try:
        os.stat(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise InputError(f"{os.fspath(path)}: {(e.strerror or str(e)).lower()}") from None
    return Path(os.path.realpath(path))


def read_text_input(path: str | os.PathLike, what: str, max_bytes: int) -> str:
    """The text of input `path` under the input rules: a regular file (`check_input`), at most
    `max_bytes` bytes (a larger one is not `what`; nothing more is read), UTF-8. Every refusal
    is an `InputError` naming `path`."""
    shown = os.fspath(path)
    check_input(path, what)
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise InputError(f"{shown}: cannot read ({e.strerror or e})") from None
    if len(raw) > max_bytes:
        raise InputError(f"{shown}: larger than {max_bytes} bytes; not a {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{shown}: not UTF-8 text (byte {e.start}); expected a {what}") from None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


@contextmanager
def atomic_path(path: str | os.PathLike, mode: int | None = None) -> Iterator[Path]:
    """A temporary file beside `path` to write into; it replaces `path` when the block ends
    without an error, and is removed when it raises (leaving `path` as it was).

    The new file gets `mode`, else the old one's permissions (or the umask's, as `open` would
    give); it has them from its creation, so a secret is never readable by others on the way.
    A symbolic link is written through, not replaced. `check_output`'s rule applies; an
    `OSError` while writing becomes an `OutputError` naming `path`."""
    shown = os.fspath(path)
    real = check_output(path)
    tmp: Path | None = None
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(real)
        if mode is None:
            mode = stat.S_IMODE(real.stat().st_mode) if real.exists() else 0o666 & ~_umask()
        fd, name = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.{writer_tag()}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
        os.chmod(tmp, mode)  # mkstemp makes it 0600
    except OSError as e:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise OutputError(f"{shown}: cannot write ({e.strerror or e})") from None
    try:
        yield tmp
        os.replace(tmp, real)
    except OutputError:
        tmp.unlink(missing_ok=True)
        raise
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{shown}: cannot write ({e.strerror or e})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def writer_tag(pid: int | None = None) -> str:
    """``PID@HOST``, in the name of a temporary file: who writes it. The host keeps a writer on
    another machine sharing the directory (NFS) from being taken for a dead process here."""
    host = socket.gethostname().split(".")[0].replace("@", "_") or "host"
    return f"{os.getpid() if pid is None else pid}@{host}"


def _remove_stale_temps(target: Path) -> None:
    """Remove ``.NAME.PID@HOST.XXXX.tmp`` files beside `target` written on this host by a process
    that no longer runs (a killed write). A temp file of a live process, of another host, or not
    named this way, is left alone."""
    prefix = f".{target.name}."
    host = writer_tag(0).split("@", 1)[1]
    try:
        names = [n for n in os.listdir(target.parent) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for n in names:
        pid_text, _, its_host = n[len(prefix):].split(".", 1)[0].partition("@")
        if its_host != host or not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue
        try:
            os.unlink(target.parent / n)
        except OSError:
            pass  # another writer removed it first, or we may not: it does no harm


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host runs (this process does; another user's is assumed to)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # exists, owned by another user (or an absurd number: leave it)
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str, mode: int | None = None) -> None:
    with atomic_path(path, mode) as tmp:
        tmp.write_text(text)
