"""open_store finds the adapter for a URL in the store layer's adapter table: an
unknown scheme is a typed error naming the known ones, another package registers its
own scheme, and only the adapter a URL names is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import headgate
from headgate import Envelope
from headgate.adapters.sqlite.opener import open_sqlite
from headgate.core import InvalidInput
from headgate.store import UnknownStoreScheme, known_schemes, open_store, register_adapter
from headgate.store.registry import Opened

# A module an adapter table entry names by string (imported on first use).
LAZY_ADAPTER = '''
from headgate.adapters.sqlite.opener import open_sqlite

def open_lazy(url, **options):
    return open_sqlite("sqlite:///" + url.split("://", 1)[1], **options)
'''


def _scheme() -> str:
    return f"hgtest{uuid.uuid4().hex[:8]}"


def test_an_unknown_scheme_is_a_typed_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownStoreScheme) as info:
        open_store(f"mysql://user@host/{tmp_path.name}")
    assert isinstance(info.value, InvalidInput)
    assert info.value.scheme == "mysql"
    assert {"sqlite", "postgresql", "postgres"} <= set(info.value.known)
    assert str(info.value).startswith("no store adapter for mysql:// URLs (known: ")
    assert "postgresql://" in str(info.value) and "sqlite://" in str(info.value)
    assert not list(tmp_path.iterdir())  # nothing was created


def test_a_path_without_a_scheme_is_a_sqlite_file(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "plain.db"))
    try:
        assert store.backend == "sqlite"
    finally:
        store.close()


def test_another_package_registers_its_adapter(tmp_path: Path) -> None:
    scheme = _scheme()
    seen: list[tuple[str, dict[str, Any]]] = []

    def open_mine(url: str, **options: Any) -> Opened:
        seen.append((url, options))
        return open_sqlite("sqlite:///" + url.split("://", 1)[1], **options)

    register_adapter(scheme, open_mine)
    assert scheme in known_schemes()
    url = f"{scheme}://{tmp_path / 'mine.db'}"
    store = open_store(url, crash_limit=5)
    try:
        # open_store migrated it and handed it out like a built-in store.
        job_id = headgate.Client(store).enqueue("k", b"p", queue="q")
        assert store.get_job(job_id) is not None
        assert store.crash_limit == 5
    finally:
        store.close()
    assert seen == [(url, {"crash_limit": 5})]
    # The same database through the built-in scheme: the adapter's store was real.
    again = open_store(f"sqlite:///{tmp_path / 'mine.db'}", migrate=False)
    try:
        assert again.get_job(job_id) is not None
    finally:
        again.close()


def test_a_scheme_is_registered_once() -> None:
    with pytest.raises(InvalidInput, match="already registered"):
        register_adapter("sqlite", open_sqlite)
    with pytest.raises(InvalidInput, match="not a URL scheme"):
        register_adapter("no scheme", open_sqlite)


def test_an_adapter_named_by_string_is_imported_when_a_url_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"hg_lazy_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(LAZY_ADAPTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    scheme = _scheme()
    register_adapter(scheme, f"{module}:open_lazy")
    assert module not in sys.modules
    store = open_store(f"{scheme}://{tmp_path / 'lazy.db'}")
    try:
        assert module in sys.modules
        assert store.enqueue_many([Envelope(kind="k", payload=b"p")])
    finally:
        store.close()


def _install_declared_adapter(root: Path, dist: str, scheme: str, module: str) -> None:
    """A distribution as pip leaves it on sys.path: its module and a dist-info whose
    entry_points.txt declares `scheme` in headgate's group."""
    (root / f"{module}.py").write_text(LAZY_ADAPTER)
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"  # as wheels name it
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[headgate.stores]\n{scheme} = {module}:open_lazy\n")


def test_an_installed_package_declares_its_scheme_for_every_interpreter(
        tmp_path: Path) -> None:
    """Another interpreter (a worker, a spawned child) opens the URL with no import of
    the adapter's package and no register_adapter: the installed entry point names it."""
    scheme, module = _scheme(), f"hg_declared_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    site.mkdir()
    _install_declared_adapter(site, "hg-declared-store", scheme, module)
    code = ("import sys, headgate\n"
            f"store = headgate.open_store({scheme!r} + '://' + sys.argv[1])\n"
            "job = headgate.Client(store).enqueue('k', b'p', queue='q')\n"
            f"assert {module!r} in sys.modules and {scheme!r} in headgate.store.known_schemes()\n"
            "print(store.backend, store.get_job(job).queue)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "declared.db")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["sqlite", "q"]


def test_two_packages_declaring_one_scheme_is_a_typed_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scheme = _scheme()
    for n in (1, 2):
        _install_declared_adapter(tmp_path, f"hg-twice-{n}", scheme, f"hg_twice_{n}_{scheme}")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidInput, match="more than one installed package"):
        open_store(f"{scheme}://{tmp_path / 'x.db'}")
    assert scheme not in known_schemes()
    assert not (tmp_path / "x.db").exists()


def test_a_missing_extra_of_a_registered_adapter_is_one_missing_extra() -> None:
    scheme = _scheme()
    register_adapter(scheme, "nowhere:open", requires=("headgate_no_such_driver",),
                     extra="nosuch", label="No Such DB")
    with pytest.raises(headgate.MissingExtra) as info:
        open_store(f"{scheme}://x")
    assert info.value.extra == "nosuch"
    assert isinstance(info.value, headgate.StoreUnavailable)


def test_a_sqlite_url_loads_no_postgresql_adapter(tmp_path: Path) -> None:
    # Only the adapter a URL names is imported: psycopg is an optional extra.
    code = ("import sys, headgate\n"
            f"headgate.open_store('sqlite:///{tmp_path / 'x.db'}').close()\n"
            "print(sorted(m for m in sys.modules if m.startswith(('psycopg', "
            "'headgate.adapters.postgres'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
