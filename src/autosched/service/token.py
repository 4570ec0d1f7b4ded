"""The bearer token that every action of the service needs.

Generated on the service's first start into ``state_dir/service.token`` with owner-only
permissions (0600), or given by the operator in a file of their own. A token file that others can
read is refused, as ssh refuses such a key: whoever can read it can change the cluster's config.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from ..atomic import check_input, read_text_input
from ..errors import InputError
from . import TOKEN_FILE

MIN_LENGTH = 16  # shorter tokens can be guessed by a script hammering localhost
MAX_BYTES = 4096  # a token file is one word; a larger file is something else


def token_path(state_dir: Path) -> Path:
    return Path(state_dir) / TOKEN_FILE


def load_or_create_token(state_dir: Path, token_file: Path | None = None) -> tuple[str, Path, bool]:
    """The token to require, the file it is in, and whether it was just generated.

    With `token_file`, that file must exist (the operator's own token); without, the state
    directory's token file is read, or created (0600, never overwriting one that appears at the
    same moment from another process)."""
    if token_file is not None:
        return _read(Path(token_file)), Path(token_file), False
    path = token_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path), path, False
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, path, True


def _read(path: Path) -> str:
    """The token in `path`: a regular file (a FIFO would block the start), owner-only, small,
    UTF-8 text; anything else is an `InputError` naming the file."""
    try:
        st = path.stat()
    except OSError as e:
        raise InputError(f"{path}: cannot read the service token: {e.strerror}") from None
    check_input(path, "service token file")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"{path}: the service token must be readable by its owner only "
                         f"(mode {stat.S_IMODE(st.st_mode):04o}; chmod 600 it)")
    token = read_text_input(path, "service token file", MAX_BYTES).strip()
    if len(token) < MIN_LENGTH or any(c.isspace() for c in token):
        raise InputError(f"{path}: the service token must be one word of at least {MIN_LENGTH} "
                         "characters")
    return token


def token_matches(given: str | None, expected: str) -> bool:
    """Constant-time comparison, so response times do not leak the token's prefix."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
