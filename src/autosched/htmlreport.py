"""A small builder for one-file HTML reports (figures inlined as base64 PNG).

A foundation, below every layer: it knows HTML, matplotlib figures and the rule for outputs, and
nothing of traces, policies or tuning, so the tuner, the workload evaluation and the adaptive loop
each build their own report with it (``tune/report.py`` ...) without importing a surface.

Usage::

    rep = Report("Tuning tiresias on philly")
    rep.heading("Convergence")
    fig, ax = rep.figure()          # a matplotlib figure (Agg backend)
    ax.plot(...)
    rep.add_figure(fig, caption="best value so far")
    rep.table(["knob", "value"], rows)
    rep.write(out_dir, data={...})  # writes index.html and report.json
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path
from typing import Any

from .atomic import OutputError, write_text_atomic
from .jsonable import jsonable

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:1em 0;font-size:.92em}th,td{border:1px solid #ddd;padding:.3em .7em;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}figure{margin:1em 0}
figcaption{color:#555;font-size:.9em}.note{color:#555}.warn{color:#a40}pre{background:#f7f7f7;padding:.7em;overflow:auto}
"""


class Report:
    def __init__(self, title: str):
        self.title = title
        self._parts: list[str] = []

    def heading(self, text: str) -> None:
        self._parts.append(f"<h2>{html.escape(text)}</h2>")

    def text(self, text: str, cls: str = "") -> None:
        attr = f' class="{cls}"' if cls else ""
        self._parts.append(f"<p{attr}>{html.escape(text)}</p>")

    def pre(self, text: str) -> None:
        self._parts.append(f"<pre>{html.escape(text)}</pre>")

    def table(self, header: list[str], rows: list[list[Any]]) -> None:
        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in r) + "</tr>" for r in rows)
        self._parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    @staticmethod
    def figure(width: float = 9, height: float = 4, **kw):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt.subplots(figsize=(width, height), **kw)

    def add_figure(self, fig, caption: str = "") -> None:
        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        data = base64.b64encode(buf.getvalue()).decode()
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self._parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}" style="max-width:100%">{cap}</figure>')

    def render(self) -> str:
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{_CSS}</style></head><body><h1>{html.escape(self.title)}</h1>{''.join(self._parts)}</body></html>")

    def write(self, out_dir: str | os.PathLike, data: Any = None) -> Path:
        """Write ``index.html`` (and ``report.json`` with `data`) into `out_dir`; returns the HTML path."""
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise OutputError(f"{out}: is not a directory; a report is a directory (index.html, report.json)")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"{out}: cannot create the report directory ({e.strerror or e})") from None
        page = out / "index.html"
        write_text_atomic(page, self.render())
        if data is not None:
            write_text_atomic(out / "report.json", json.dumps(jsonable(data), indent=2))
        return page


def _cell(c: Any) -> str:
    if isinstance(c, float):
        return f"{c:,.4g}" if abs(c) < 1000 else f"{c:,.0f}"
    return str(c)


