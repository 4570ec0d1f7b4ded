"""The files Slurm's client commands read, so that no output of autosched ever replaces one.

A command that talks to Slurm (``sacct``, ``scontrol``) declares these as its inputs
(`autosched.atomic.protect_inputs`): ``slurm history --out $SLURM_CONF`` would otherwise replace
the cluster's slurm.conf with a CSV. They are slurm.conf itself (the path given, ``$SLURM_CONF``,
or Slurm's default), every file it includes (``Include PATH``, relative to slurm.conf's folder,
wildcards expanded, followed into included files; the agent's include file is one), and the
other configuration files Slurm reads from the same folder (``gres.conf``, ``cgroup.conf``, ...:
every ``*.conf`` there).

`own_settings` reads what slurm.conf itself sets (without the agent's include file): the values
the include file shadows, and the ``SchedulerParameters`` entries it must carry over.
"""

from __future__ import annotations

import glob
import os
import re
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


# Lines that describe a node, partition, ... rather than set a cluster-wide key
_RECORDS = frozenset({"nodename", "partitionname", "nodeset", "frontendname", "downnodes",
                      "switchname"})
_PAIR = re.compile(r'([A-Za-z][\w/.-]*)=("[^"]*"|\S*)')


def own_settings(conf: str | os.PathLike, skip: str | os.PathLike) -> dict[str, str]:
    """The cluster-wide ``Key=Value`` settings of `conf` and the files it includes (in the order
    Slurm reads them; the last value of a key wins), leaving out the file `skip` (the agent's
    include file): name -> value, the name as last written. Node and partition lines are not
    settings. A file that cannot be read counts as empty."""
    out: dict[str, tuple[str, str]] = {}  # lower-cased name -> (name, value)
    _read_settings(Path(conf), os.path.realpath(skip), out, set())
    return dict(out.values())


def _read_settings(conf: Path, skip: str, out: dict[str, tuple[str, str]], seen: set[str]) -> None:
    real = os.path.realpath(conf)
    if real in seen or real == skip:
        return
    seen.add(real)
    try:
        if not conf.is_file():
            return
        with open(conf, "rb") as f:
            text = f.read(_MOST).decode("utf-8", errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        body = line.split("#")[0].strip()
        words = body.split(None, 1)
        if len(words) == 2 and words[0].lower() == "include":
            name = words[1].strip()
            path = name if os.path.isabs(name) else str(conf.parent / name)
            for m in (sorted(glob.glob(path)) if glob.has_magic(path) else [path]):
                _read_settings(Path(m), skip, out, seen)
            continue
        pairs = _PAIR.findall(body)
        if not pairs or pairs[0][0].lower() in _RECORDS:
            continue
        for key, value in pairs:
            out[key.lower()] = (key, value.strip('"'))
