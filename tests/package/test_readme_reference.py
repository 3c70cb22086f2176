"""README is what a new user reads after `pip install`: its Install section names every
extra the package offers and its Configuration table every HG_ variable a `headgate`
command reads, so neither is found only in the code or the CHANGELOG."""

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
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    install = _section("Install")
    missing = [name for name in extras
               if name != "test" and f"headgate[{name}]" not in install]
    assert missing == []


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
