"""The tables of the live agent's knobs in docs/slurm.md, made from the code: the knobs of
`multifactor` it manages on a live cluster and the ones it pins (`autosched.live.knobs`, over the
policy's `ConfigSpace`), so the operator's guide cannot drift from what the agent does.

    PYTHONPATH=src python scripts/knob_tables.py           # rewrite the table in docs/slurm.md
    PYTHONPATH=src python scripts/knob_tables.py --check   # exit 1 if it is not current

The table goes between ``<!-- knob tables: BEGIN -->`` and ``<!-- knob tables: END -->``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from autosched.live.knobs import BACKFILL_PREFIX, compound_parts, live_space  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.space import Bool, Categorical, Float, Int, Knob  # noqa: E402

DOC = REPO / "docs" / "slurm.md"
POLICY = "multifactor"
BEGIN, END = "<!-- knob tables: BEGIN -->", "<!-- knob tables: END -->"


def _value(knob: Knob, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = f"{value:,.10g}" if isinstance(value, (int, float)) else str(value)
    return f"{text} {knob.unit}" if knob.unit else text


def _range(knob: Knob) -> str:
    if isinstance(knob, (Int, Float)):
        return f"{_value(knob, knob.low)} – {_value(knob, knob.high)}" + (", log scale" if knob.log else "")
    if isinstance(knob, Bool):
        return "yes / no"
    if isinstance(knob, Categorical):
        return " / ".join(map(str, knob.choices))
    return ""


def _setting(name: str) -> str:
    """Where a managed knob lives in slurm.conf."""
    parts = compound_parts(name)
    if parts is not None:
        return f"`{parts[0]}` entry `{parts[1]}`"
    if name.startswith(BACKFILL_PREFIX):
        return f"`SchedulerParameters` entry `{name}`"
    return f"`{name}`"


def tables(policy: str = POLICY) -> list[str]:
    space = live_space(policy)
    out = [f"The knobs of `{policy}` the agent manages ({len(space.managed)}; generated from the code by "
           "`scripts/knob_tables.py`):", "",
           "| knob | in slurm.conf | range | default | what it sets |", "|---|---|---|---|---|"]
    out += [f"| `{k.name}` | {_setting(k.name)} | {_range(k)} | {_value(k, k.default)} | {k.help} |" for k in space.managed]
    out += ["", f"Fixed in live mode ({len(space.fixed)}; the value the tuner holds them at unless "
            "`agent init --fix KNOB=VALUE` says otherwise):", "", "| knob | held at |", "|---|---|"]
    out += [f"| `{k.name}` | {_value(k, space.fixed[k.name])} |" for k in get_policy(policy).space if k.name in space.fixed]
    return out


def render(doc: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{DOC}: no markers {BEGIN} ... {END}")
    return pattern.sub(lambda _: "\n".join([BEGIN, *tables(), END]), doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if the table is not current")
    args = ap.parse_args()
    old = DOC.read_text()
    new = render(old)
    if args.check:
        if new != old:
            raise SystemExit(f"{DOC}: the knob tables are not current; run PYTHONPATH=src python scripts/knob_tables.py")
        print(f"{DOC}: current")
    elif new != old:
        DOC.write_text(new)
        print(f"{DOC}: knob tables rewritten")


if __name__ == "__main__":
    main()
