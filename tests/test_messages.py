"""Library errors name the parameter or setting, never a command-line option: the same library
serves the CLI, the HTTP service and Python callers, which spell their inputs differently."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import typer

import autosched
from autosched.cli import build_app

SRC = Path(autosched.__file__).parent


def _cli_options() -> set[str]:
    """Every long option of every `autosched` command."""
    found: set[str] = set()
    todo: list[click.Command] = [typer.main.get_command(build_app())]
    while todo:
        cmd = todo.pop()
        if isinstance(cmd, click.Group):
            todo.extend(cmd.commands.values())
        found.update(o for p in cmd.params for o in p.opts + p.secondary_opts if o.startswith("--"))
    return found - {"--help"}


def _raised_texts(path: Path) -> list[tuple[int, str]]:
    """The string pieces of every `raise` statement in a module, with their line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and node.exc is not None:
            out += [(c.lineno, c.value) for c in ast.walk(node.exc)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return out


def test_library_errors_never_name_a_cli_option():
    options = _cli_options()
    assert {"--format", "--horizon", "--sampler", "--cluster"} <= options  # the walk found them
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(options))) + r")(?![\w-])")
    bad = [f"{path.relative_to(SRC)}:{line}: {text!r}"
           for path in sorted(SRC.rglob("*.py")) if path.relative_to(SRC).parts[0] != "cli"
           for line, text in _raised_texts(path) if pattern.search(text)]
    assert not bad, "\n".join(bad)


def test_a_file_the_command_cannot_open_is_one_line_naming_it(tmp_path):
    """The one place (`_one_line_errors`) turns an OSError, as a command lets it rise, into
    ``error: FILE: reason`` and exit code 2; a project error keeps its own message; anything
    else keeps its traceback (a bug)."""
    from typer.testing import CliRunner

    from autosched.cli import _one_line_errors
    from autosched.errors import InputError

    missing, folder = tmp_path / "none.csv", tmp_path
    raised: dict[str, Exception] = {"project": InputError("t.csv, row 3: bad"), "bug": KeyError("k")}

    def cmd(what: str) -> None:
        if what == "missing":
            missing.open()
        elif what == "folder":
            folder.open("w")
        elif what == "no-file":
            raise OSError(5, "Input/output error")
        else:
            raise raised[what]

    app = typer.Typer()
    app.command()(_one_line_errors(cmd))
    runner = CliRunner()
    expect = {"missing": f"error: {missing}: No such file or directory\n",
              "folder": f"error: {folder}: Is a directory\n",
              "project": "error: t.csv, row 3: bad\n"}
    for what, line in expect.items():
        r = runner.invoke(app, [what])
        assert (r.exit_code, r.output) == (2, line), what
    r = runner.invoke(app, ["bug"])
    assert r.exit_code == 1 and isinstance(r.exception, KeyError)
    r = runner.invoke(app, ["no-file"])  # an OSError about no file (a pipe, a socket) keeps its traceback
    assert r.exit_code == 1 and isinstance(r.exception, OSError)
