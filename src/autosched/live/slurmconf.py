"""The files Slurm's client commands read, so that no output of autosched ever replaces one.

A command that talks to Slurm (``sacct``, ``scontrol``) declares these as its inputs
(`autosched.atomic.protect_inputs`): ``slurm history --out $SLURM_CONF`` would otherwise replace
the cluster's slurm.conf with a CSV. They are slurm.conf itself (the path given, ``$SLURM_CONF``,
or Slurm's default), every file it includes (``Include PATH``, relative to slurm.conf's folder,
wildcards expanded, followed into included files; the agent's include file is one), and the
other configuration files Slurm reads from the same folder (``gres.conf``, ``cgroup.conf``, ...:
every ``*.conf`` there).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

# Where Slurm's commands look without SLURM_CONF (the Debian and upstream default)
DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")
_MOST = 1 << 20  # bytes read of one file: a slurm.conf is a few kilobytes


def slurm_conf_path(given: str | os.PathLike | None) -> Path:
    """The slurm.conf Slurm's commands read: `given`, else ``$SLURM_CONF``, else the default."""
    if given:
        return Path(given)
    env = os.environ.get("SLURM_CONF")
    return Path(env) if env else DEFAULT_SLURM_CONF


def slurm_config_files(conf: str | os.PathLike | None) -> list[Path]:
    """slurm.conf (`slurm_conf_path`), the files it includes (recursively) and every ``*.conf``
    beside it, in that order, each once. Files that cannot be read are listed, not opened: a
    path that may hold Slurm's configuration is protected whether or not it exists yet."""
    first = slurm_conf_path(conf)
    out: list[Path] = []
    seen: set[str] = set()
    todo = [first]
    while todo:
        path = todo.pop(0)
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        out.append(path)
        todo += _includes(path)
    for sibling in sorted(first.parent.glob("*.conf")):
        if os.path.realpath(sibling) not in seen:
            seen.add(os.path.realpath(sibling))
            out.append(sibling)
    return out


def _includes(conf: Path) -> list[Path]:
    """The files an ``Include`` line of `conf` names (relative ones from `conf`'s folder, as
    Slurm reads them); none when `conf` is not a readable regular file."""
    try:
        if not conf.is_file():
            return []
        with open(conf, "rb") as f:
            text = f.read(_MOST).decode("utf-8", errors="replace")
    except OSError:
        return []
    found: list[Path] = []
    for line in text.splitlines():
        words = line.split("#")[0].split(None, 1)
        if len(words) == 2 and words[0].lower() == "include":
            name = words[1].strip()
            path = name if os.path.isabs(name) else str(conf.parent / name)
            matches = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
            found += [Path(m) for m in matches]
    return found
