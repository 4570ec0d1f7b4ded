"""The settings tables of the docs, made from the settings' declarations (`autosched.adapt.setting`):
the loop's settings, which `autosched run` and `autosched agent init` share (docs/adaptive.md),
and the live agent's own (docs/slurm.md), each with its option, default(s), range and help, so
that the docs cannot drift from what the commands take.

    PYTHONPATH=src python scripts/settings_table.py           # rewrite the tables
    PYTHONPATH=src python scripts/settings_table.py --check   # exit 1 if one is not current

Each table goes between ``<!-- settings: NAME BEGIN -->`` and ``<!-- settings: NAME END -->``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from autosched.adapt import Settings  # noqa: E402
from autosched.adapt.config import LOOP_FIELDS, LoopConfig  # noqa: E402
from autosched.adapt.setting import Setting, range_text, settings_of  # noqa: E402
from autosched.live.settings import AgentSettings  # noqa: E402
from autosched.space import Bool  # noqa: E402
from autosched.timeparse import format_duration  # noqa: E402

DOCS = {"loop": REPO / "docs" / "adaptive.md", "agent": REPO / "docs" / "slurm.md"}


def _option(s: Setting) -> str:
    """The setting's option ("—": none of its own; the help says what sets it)."""
    return " ".join(f"`{f}`" for f in s.flags) if s.flags else "—"


def _default(s: Setting, value: Any) -> str:
    if s.duration and value is not None:
        return format_duration(value)
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, (dict, list, tuple)):
        return "none" if not value else str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _range(cls: type, name: str) -> str:
    knob = cls.KNOBS.get(name)
    if knob is None or isinstance(knob, Bool) or range_text(knob) == "a number":
        return ""
    return range_text(knob)


def loop_table() -> list[str]:
    run, agent = Settings(), AgentSettings(connector={"kind": "fake", "directory": "."})
    out = ["The loop's settings (generated from their declarations in `autosched.adapt.config` by "
           "`scripts/settings_table.py`):", "",
           "| option | setting | `run` | `agent init` | range | what it does |", "|---|---|---|---|---|---|"]
    for name, s in settings_of(LoopConfig).items():
        out.append(f"| {_option(s)} | `{name}` | {_default(s, getattr(run, name))} | "
                   f"{_default(s, getattr(agent, name))} | {_range(LoopConfig, name)} | {s.help} |")
    return out


def agent_table() -> list[str]:
    out = ["The agent's own settings (generated from their declarations in `autosched.live.settings` "
           "by `scripts/settings_table.py`; the loop's are in [The adaptive loop](adaptive.md)):", "",
           "| option | setting | default | range | what it does |", "|---|---|---|---|---|"]
    fields = settings_of(AgentSettings)
    defaults = {f: getattr(AgentSettings, f, None) for f in fields}
    for name, s in fields.items():
        if name in LOOP_FIELDS:
            continue
        default = "required" if name == "connector" else _default(s, defaults[name])
        out.append(f"| {_option(s)} | `{name}` | {default} | {_range(AgentSettings, name)} | {s.help} |")
    return out


TABLES = {"loop": loop_table, "agent": agent_table}


def render(name: str, doc: str) -> str:
    begin, end = f"<!-- settings: {name} BEGIN -->", f"<!-- settings: {name} END -->"
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{DOCS[name]}: no markers {begin} ... {end}")
    return pattern.sub(lambda _: "\n".join([begin, *TABLES[name](), end]), doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is not current")
    args = ap.parse_args()
    stale = []
    for name, path in DOCS.items():
        old = path.read_text()
        new = render(name, old)
        if new == old:
            print(f"{path}: current")
        elif args.check:
            stale.append(str(path))
        else:
            path.write_text(new)
            print(f"{path}: settings table rewritten")
    if stale:
        raise SystemExit(f"{', '.join(stale)}: the settings tables are not current; run "
                         "PYTHONPATH=src python scripts/settings_table.py")


if __name__ == "__main__":
    main()
