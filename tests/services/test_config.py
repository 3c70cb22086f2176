"""Settings parsing: the environment variables, and the rule that a non-loopback bind
needs tokens or an explicit opt-out (docs/api.md, Access)."""

from __future__ import annotations

import pytest

from headgate.services.config import ConfigError, Settings, redact_url


def test_defaults_are_sqlite_on_loopback() -> None:
    s = Settings.from_env({})
    assert s.store_url() == "sqlite:///headgate.db"
    assert s.api_addr == "127.0.0.1:8080"
    assert (s.read_only, s.allow_remote, s.lease_ms, s.api_tokens) == (False, False, 30000, ())
    assert (s.cookie_secure, s.auth_failures_per_minute) == (False, 20)


def test_env_is_read() -> None:
    s = Settings.from_env(
        {
            "HG_STORE": "pg",
            "HG_PG": "postgresql://u@db/hg",
            "HG_API_ADDR": "[::1]:9000",
            "HG_READ_ONLY": "1",
            "HG_API_ALLOW_REMOTE": "true",
            "HG_LEASE_MS": "5000",
            "HG_API_TOKENS": "a, b,,",
            "HG_COOKIE_SECURE": "1",
            "HG_AUTH_FAILURES_PER_MINUTE": "5",
        }
    )
    assert s.store_url() == "postgresql://u@db/hg"
    assert (s.api_addr, s.read_only, s.allow_remote, s.lease_ms) == ("[::1]:9000", True, True, 5000)
    assert s.api_tokens == ("a", "b")
    assert (s.cookie_secure, s.auth_failures_per_minute) == (True, 5)
    assert "api_tokens" not in repr(s)  # tokens never end up in logs


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"HG_STORE": "mysql"}, "HG_STORE"),
        ({"HG_LEASE_MS": "0"}, "at least 1"),
        ({"HG_LEASE_MS": "soon"}, "HG_LEASE_MS"),
        ({"HG_READ_ONLY": "maybe"}, "HG_READ_ONLY"),
        ({"HG_AUTH_FAILURES_PER_MINUTE": "0"}, "HG_AUTH_FAILURES_PER_MINUTE"),
        ({"HG_COOKIE_SECURE": "sometimes"}, "HG_COOKIE_SECURE"),
    ],
)
def test_bad_env_is_rejected_by_name(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Settings.from_env(env)


def test_pg_without_url_is_an_error() -> None:
    with pytest.raises(ConfigError, match="HG_PG"):
        Settings.from_env({"HG_STORE": "pg"}).store_url()


def test_store_url_override() -> None:
    base = Settings.from_env({})
    assert base.with_store_url("sqlite:////tmp/x.db").store_url() == "sqlite:////tmp/x.db"
    assert base.with_store_url("postgresql://h/db").store == "pg"
    with pytest.raises(ConfigError):
        base.with_store_url("redis://h")


@pytest.mark.parametrize(
    ("addr", "allowed"),
    [
        ("127.0.0.1:8080", True),
        ("127.0.0.2:8080", True),
        ("localhost:8080", True),
        ("[::1]:8080", True),
        ("0.0.0.0:8080", False),
        ("[::]:8080", False),
        ("example.internal:8080", False),
    ],
)
def test_remote_bind_needs_tokens_or_explicit_allow(addr: str, allowed: bool) -> None:
    assert (Settings().remote_bind_refusal(addr) is None) == allowed
    assert Settings(allow_remote=True).remote_bind_refusal(addr) is None
    assert Settings(api_tokens=("t",)).remote_bind_refusal(addr) is None


def test_redact_url_hides_password() -> None:
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_url("sqlite:///x.db") == "sqlite:///x.db"


def test_start_up_migrations_are_on_unless_hg_migrate_turns_them_off() -> None:
    assert Settings.from_env({}).migrate is True
    assert Settings.from_env({}).store_options() == {}
    off = Settings.from_env({"HG_MIGRATE": "0"})
    assert off.migrate is False
    assert off.store_options() == {"migrate": False}
    assert Settings.from_env({"HG_MIGRATE": "yes"}).migrate is True
    with pytest.raises(ConfigError, match="HG_MIGRATE"):
        Settings.from_env({"HG_MIGRATE": "later"})
