"""README is what a new user reads after `pip install`: its Install section names every
extra the package offers and its Configuration table every HG_ variable a `headgate`
command reads, so neither is found only in the code or the CHANGELOG. Every install
line names the distribution `headgate-queue`: `headgate` on the package index is an
unrelated project, so a bare `pip install headgate` installs a stranger's code."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import click

from headgate import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_install_names_every_user_facing_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    install = _section("Install")
    missing = [name for name in project["optional-dependencies"]
               if name != "test" and f"pip install '{DISTRIBUTION}[{name}]'" not in install]
    assert missing == []
    assert f"pip install {DISTRIBUTION}\n" in _section("Quickstart")


DISTRIBUTION = "headgate-queue"
# A requirement naming the import name as if it were the distribution: `headgate`,
# `headgate[postgres]`, `headgate==0.2.0`, quoted or not.
BARE = re.compile(r"""^['"`]?headgate(\[[^\]]*\])?([<>=!~;].*)?['"`]?$""")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _pip_install_lines() -> list[tuple[str, str]]:
    return [(path.name, line.strip()) for path in DOCS
            for line in path.read_text().splitlines() if "pip install" in line]


def test_no_install_line_names_a_bare_headgate() -> None:
    lines = _pip_install_lines()
    assert any(DISTRIBUTION in line for where, line in lines if where == "README.md")
    bare = [(where, line) for where, line in lines
            for token in line.split("pip install", 1)[1].split() if BARE.match(token)]
    assert bare == []


def test_extras_are_spelled_with_the_distribution_name() -> None:
    # PERFORMANCE.md's `headgate[pg]` are benchmark row labels, not requirements.
    texts = {p.name: p.read_text() for p in DOCS if p.name != "PERFORMANCE.md"}
    texts |= {str(p.relative_to(ROOT)): p.read_text()
              for p in [*(ROOT / "headgate").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]}
    old = {name: re.findall(r"(?<![\w-])headgate\[\w+", text) for name, text in texts.items()}
    assert {name: found for name, found in old.items() if found} == {}


def test_configuration_table_lists_every_variable_the_commands_read() -> None:
    table = set(re.findall(r"^\| `(HG_[A-Z_]+)` \|", _section("Configuration"), re.M))
    read: set[str] = set()
    for command in cli.main.commands.values():
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            names = [envvar] if isinstance(envvar, str) else list(envvar or [])
            read |= {n for n in names if n.startswith("HG_")}
    assert isinstance(cli.main, click.Group) and read  # the walk found options
    assert sorted(read - table) == []
