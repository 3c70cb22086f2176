"""Operations residue at the command line and in the library, with real
processes: a store path in a missing directory is refused (exit 69) and creates
nothing; a lease shorter than the documented minimum is refused with one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import headgate_cmd

import headgate
from headgate import Store, Worker
from headgate.core import InvalidInput
from headgate.services.config import ConfigError, Settings
from headgate.worker.runtime import MIN_LEASE_MS

TESTS_DIR = Path(__file__).resolve().parents[1]
EXIT_STORE_UNAVAILABLE = 69
EXIT_CONFIG = 2


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    return subprocess.run([*headgate_cmd(), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headgate: error: "), output
    assert "Traceback" not in output, output
    return lines[0]


@pytest.mark.parametrize("name", ["migrate", "serve", "worker"])
def test_a_store_in_a_missing_directory_is_refused_and_nothing_is_created(
    tmp_path: Path, name: str
) -> None:
    url = f"sqlite:///{tmp_path}/nonexistent/dir/x.db"
    args = {
        "migrate": ["migrate", "--store", url],
        "serve": ["serve", "--store", url, "--addr", "127.0.0.1:1"],
        "worker": ["worker", "--app", "worker_app:make_worker", "--store", url],
    }[name]
    result = run(tmp_path, *args)
    assert result.returncode == EXIT_STORE_UNAVAILABLE, result.stdout + result.stderr
    line = one_error_line(result)
    assert line.startswith("headgate: error: store unavailable: ")
    assert "nonexistent/dir" in line and "does not exist" in line
    assert list(tmp_path.iterdir()) == []  # no directory, no database


def test_the_default_database_is_still_created_in_the_working_directory(
    tmp_path: Path
) -> None:
    result = run(tmp_path, "migrate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "headgate.db").is_file()


def test_a_store_in_a_missing_directory_is_a_typed_error_in_the_library(
    tmp_path: Path
) -> None:
    with pytest.raises(headgate.StoreUnavailable, match="does not exist"):
        headgate.open_store(f"sqlite:///{tmp_path}/missing/x.db")
    assert list(tmp_path.iterdir()) == []


def test_a_lease_below_the_minimum_is_refused_by_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    result = run(tmp_path, "worker", "--app", "worker_app:make_worker", "--store", url,
                 "--lease-ms", "1")
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    assert one_error_line(result) == (
        f"headgate: error: lease_ms must be at least {MIN_LEASE_MS} (milliseconds): "
        "shorter leases expire between renewals")


def test_a_lease_below_the_minimum_is_refused_by_the_library(store: Store) -> None:
    for lease_ms in (1, MIN_LEASE_MS - 1):
        with pytest.raises(InvalidInput, match=f"at least {MIN_LEASE_MS}"):
            Worker(store, lease_ms=lease_ms)
        with pytest.raises(InvalidInput, match=f"at least {MIN_LEASE_MS}"):
            Worker(store).configure(lease_ms=lease_ms)
    assert Worker(store, lease_ms=MIN_LEASE_MS).lease_ms == MIN_LEASE_MS


def test_trusted_proxies_are_a_count_or_addresses() -> None:
    assert Settings.from_env({}).trusted_proxies is None
    assert Settings.from_env({"HG_TRUSTED_PROXIES": "2"}).trusted_proxies == 2
    nets = Settings.from_env({"HG_TRUSTED_PROXIES": "10.0.0.5, 10.1.0.0/16,::1"})
    assert [str(n) for n in nets.trusted_proxies] == ["10.0.0.5/32", "10.1.0.0/16", "::1/128"]
    for bad in ("0", "proxy.example", "10.0.0.0/33", "1,"):
        with pytest.raises(ConfigError, match="HG_TRUSTED_PROXIES"):
            Settings.from_env({"HG_TRUSTED_PROXIES": bad})


def test_a_bad_trusted_proxies_setting_is_one_error_line(tmp_path: Path) -> None:
    env_run = subprocess.run(
        [*headgate_cmd(), "serve", "--store", f"sqlite:///{tmp_path}/s.db", "--addr",
         "127.0.0.1:1"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("HG_")},
             "HG_TRUSTED_PROXIES": "proxy.example"})
    assert env_run.returncode == EXIT_CONFIG, env_run.stderr
    assert "HG_TRUSTED_PROXIES" in one_error_line(env_run)
