"""The SQL migrations shipped inside the package (``headgate/db/<engine>/NNNN_*.sql``).

Read through ``importlib.resources`` so an installed wheel (or a zip) finds them as a
checkout does; nothing here depends on where the package lies on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

from headgate.core import StoreUnavailable


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(engine: str) -> list[Migration]:
    """The numbered migrations for ``engine`` ("sqlite" or "postgres"), in order."""
    try:
        folder = files("headgate").joinpath("db", engine)
        entries = [e for e in folder.iterdir() if e.name.endswith(".sql") and e.name[:1].isdigit()]
        found = [
            Migration(int(e.name.split("_", 1)[0]), e.name, e.read_text(encoding="utf-8"))
            for e in entries
        ]
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(
            f"store unavailable: cannot read headgate's {engine} migrations ({exc})"
        ) from exc
    if not found:
        raise StoreUnavailable(f"store unavailable: headgate ships no {engine} migrations")
    return sorted(found, key=lambda m: m.version)


def known_versions(engine: str) -> set[int]:
    """The migration numbers this code ships."""
    return {m.version for m in migrations(engine)}
