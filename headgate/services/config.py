"""Runtime settings read from the environment.

One frozen object, built once at start-up, so every layer sees the same answer and
nothing re-reads ``os.environ`` behind the operator's back. Flags override it by
building a modified copy (``with_store_url``), never by mutating it.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple, TypedDict
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from headgate.store.port import StoreBasics

DEFAULT_SQLITE_PATH = "headgate.db"
DEFAULT_API_ADDR = "127.0.0.1:8080"
DEFAULT_LEASE_MS = 30_000
DEFAULT_AUTH_FAILURES_PER_MINUTE = 20
# History and latency buckets are kept this long. The minimum covers the console's
# longest chart (24 hours in 15-minute buckets) with an hour to spare.
DEFAULT_HISTORY_RETENTION_MS = 7 * 24 * 3_600_000
MIN_HISTORY_RETENTION_MS = 25 * 3_600_000
# The audit log of operator actions is kept this long (90 days); at least an hour, so a
# value meant in seconds is refused rather than emptying the log.
DEFAULT_AUDIT_RETENTION_MS = 90 * 24 * 3_600_000
MIN_AUDIT_RETENTION_MS = 3_600_000
# A token's name in the tokens file (`name=`): what the audit log records as its actor.
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


class ConfigError(ValueError):
    """A setting is present but unusable; the message names the variable."""


# How a SQLite URL names its file: said wherever a store URL is asked for or refused.
SQLITE_URL_RULE = ("sqlite:///relative/path.db (three slashes) is relative to the working "
                   "directory, sqlite:////absolute/path.db (four) is an absolute path")
STORE_URL_FORMS = ("sqlite:///relative/path.db, sqlite:////absolute/path.db or "
                   "postgresql://user@host/dbname")
STORE_VARIABLES = ("HG_STORE", "HG_SQLITE", "HG_PG")


def names_a_store(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment says where the store is, rather than leaving it to the
    default SQLite file in the working directory."""
    env = os.environ if env is None else env
    return any(env.get(name, "").strip() for name in STORE_VARIABLES)


def store_source(flag_url: str | None, env: Mapping[str, str] | None = None) -> str:
    """Where a command's store came from, for a log line or an error: the flag, the
    variables that are set, or the default."""
    if flag_url:
        return "--store"
    env = os.environ if env is None else env
    named = [name for name in STORE_VARIABLES if env.get(name, "").strip()]
    if named:
        return "$" + ", $".join(named)
    return f"the default: no --store, {', '.join(STORE_VARIABLES)}"


def _parse_store_url(url: str, source: str) -> tuple[str, str]:
    """(``sqlite`` and the file path | ``pg`` and the URL) from a store URL, or a
    ConfigError naming ``source`` and the forms a URL takes."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        if not url.lower().startswith("sqlite:///") or len(url) <= len("sqlite:///"):
            raise ConfigError(f"{source}: {url!r} is not a SQLite URL: {SQLITE_URL_RULE}")
        return "sqlite", url[len("sqlite:///"):]
    if scheme in ("postgres", "postgresql"):
        return "pg", url
    raise ConfigError(f"{source} must be a store URL ({STORE_URL_FORMS}), got "
                      f"{redact_url(url)!r}")


class _StoreFields(TypedDict):
    store: str
    sqlite_path: str
    pg_url: str | None


def _store_fields(env: Mapping[str, str]) -> _StoreFields:
    """The store Settings fields from HG_STORE: a URL, as ``--store`` and ``App(url)``
    take, or the older ``sqlite`` / ``pg``, which name HG_SQLITE's path (it may be a
    sqlite:/// URL too) and HG_PG's URL."""
    raw = env.get("HG_STORE", "").strip()
    sqlite_path = env.get("HG_SQLITE", "").strip() or DEFAULT_SQLITE_PATH
    if sqlite_path.lower().startswith("sqlite:"):
        sqlite_path = _parse_store_url(sqlite_path, "HG_SQLITE")[1]
    fields = _StoreFields(store=raw.lower() or "sqlite", sqlite_path=sqlite_path,
                          pg_url=env.get("HG_PG", "").strip() or None)
    if ":" in raw:  # a URL (the words sqlite and pg have no colon)
        kind, where = _parse_store_url(raw, "HG_STORE")
        fields["store"] = kind
        if kind == "sqlite":
            fields["sqlite_path"] = where
        else:
            fields["pg_url"] = where
    return fields


def display_store_url(url: str) -> str:
    """A store URL as a log line or an error shows it: without its password, and a
    SQLite file as its absolute path (which file a relative one meant is the question)."""
    if url.lower().startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        return "sqlite:///" + (path if path == ":memory:" else os.path.abspath(path))
    return redact_url(url)


def url_of_store(store: StoreBasics) -> str | None:
    """The URL of an open store (a SQLite file's path, a PostgreSQL store's URL), or
    None for a store that cannot say."""
    return store.store_url()


def same_store(a: str, b: str) -> bool:
    """Whether two store URLs name one database: one SQLite file (resolved against the
    working directory, symbolic links followed), or one PostgreSQL host, port, user
    and database; a password or a connection option does not make another store."""
    return _store_identity(a) == _store_identity(b)


def _store_identity(url: str) -> tuple[str, ...]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite" and url.lower().startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        return ("sqlite", path if path == ":memory:" else os.path.realpath(path))
    if scheme in ("postgres", "postgresql"):
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            host, port = (parts.hostname or "").lower(), parts.port
        except ValueError:  # several hosts (h1:5432,h2:5432): compare them as written
            host, port = parts.netloc.rsplit("@", 1)[-1].lower(), None
        return ("postgresql", query.get("host", host), str(query.get("port", port or 5432)),
                query.get("user", unquote(parts.username or "")),
                query.get("dbname", unquote(parts.path.lstrip("/"))))
    return (url,)


def _bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    # Silently treating a typo as "off" could e.g. leave a server writable.
    raise ConfigError(f"{name} must be one of 1/0/true/false/yes/no/on/off, got {raw!r}")


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < 1:
        # A zero duration is rejected naming the minimum, never clamped to it.
        raise ConfigError(f"{name} must be at least 1, got {value}")
    return value


def history_retention_ms_from_env(env: Mapping[str, str] | None = None) -> int:
    """HG_HISTORY_RETENTION_MS (Settings.history_retention_ms): also read by a
    DutyRunner not handed a value, so a worker holding the retention duty keeps the
    same horizon as the server."""
    env = os.environ if env is None else env
    value = _positive_int(env, "HG_HISTORY_RETENTION_MS", DEFAULT_HISTORY_RETENTION_MS)
    if value < MIN_HISTORY_RETENTION_MS:
        raise ConfigError(f"HG_HISTORY_RETENTION_MS must be at least "
                          f"{MIN_HISTORY_RETENTION_MS} (25 hours), got {value}")
    return value


def audit_retention_ms_from_env(env: Mapping[str, str] | None = None) -> int:
    """HG_AUDIT_RETENTION_MS (Settings.audit_retention_ms), read by a DutyRunner not
    handed a value as history_retention_ms_from_env is."""
    env = os.environ if env is None else env
    value = _positive_int(env, "HG_AUDIT_RETENTION_MS", DEFAULT_AUDIT_RETENTION_MS)
    if value < MIN_AUDIT_RETENTION_MS:
        raise ConfigError(f"HG_AUDIT_RETENTION_MS must be at least "
                          f"{MIN_AUDIT_RETENTION_MS} (an hour), got {value}")
    return value


def split_addr(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too) so callers can validate before binding."""
    host, sep, port_text = addr.strip().rpartition(":")
    if not sep or not host:
        raise ConfigError(f"address must look like HOST:PORT, got {addr!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"address port must be a number, got {addr!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"address port must be 0..65535, got {addr!r}")
    return host, port


def is_loopback_host(host: str) -> bool:
    """True only for hosts that cannot be reached from another machine.

    Names other than ``localhost`` count as remote: resolving them here would make the
    safety check depend on DNS.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redact_url(url: str) -> str:
    """Hide a password before a store URL is printed or logged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _token_list(raw: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in raw.split(",") if t.strip())


class TokensFile(NamedTuple):
    full: tuple[str, ...]
    read_only: tuple[str, ...]
    # (token, name) for the lines that give a `name=`.
    names: tuple[tuple[str, str], ...] = ()
    # Worker tokens (`worker`): the worker protocol only.
    worker: tuple[str, ...] = ()
    # (token, queues) for the worker lines that give a `queues=`.
    worker_queues: tuple[tuple[str, tuple[str, ...]], ...] = ()


def read_tokens_file(path: str) -> TokensFile:
    """(read-write, read-only, worker) bearer tokens from a file: one per line,
    optionally followed by `rw` (the default), `ro` or `worker` and by `name=NAME`, the
    name the audit log records for what the token does; a `worker` token may add
    `queues=A,B`, the only queues it may serve. Blank lines and `#` comments are
    skipped. A file keeps secrets out of the environment and the process list."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ConfigError(f"HG_API_TOKENS_FILE cannot be read: {exc.strerror}") from None
    full: list[str] = []
    read_only: list[str] = []
    worker: list[str] = []
    worker_queues: dict[str, tuple[str, ...]] = {}
    names: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        kind, name, queues = None, None, None
        for word in words[1:]:
            if word.startswith("name=") and name is None:
                name = word[len("name="):]
                if not TOKEN_NAME.fullmatch(name):
                    raise ConfigError(
                        f"HG_API_TOKENS_FILE line {number}: a name is 1-64 letters, digits "
                        "or ._@+- starting with a letter or digit")
                if name in names.values():
                    raise ConfigError(f"HG_API_TOKENS_FILE line {number}: the name "
                                      f"{name!r} is already another token's")
            elif word.lower() in ("rw", "ro", "worker") and kind is None:
                kind = word.lower()
            elif word.startswith("queues=") and queues is None:
                queues = tuple(q for q in word[len("queues="):].split(",") if q)
                if not queues:
                    raise ConfigError(f"HG_API_TOKENS_FILE line {number}: queues= names "
                                      "at least one queue")
            else:
                # The token itself is never echoed back.
                raise ConfigError(f"HG_API_TOKENS_FILE line {number}: expected "
                                  "`TOKEN [rw|ro|worker] [name=NAME] [queues=A,B]`")
        if queues is not None and kind != "worker":
            raise ConfigError(f"HG_API_TOKENS_FILE line {number}: queues= is for worker "
                              "tokens only")
        target = {"ro": read_only, "worker": worker}.get(kind or "rw", full)
        target.append(words[0])
        if name is not None:
            names[words[0]] = name
        if queues is not None:
            worker_queues[words[0]] = queues
    return TokensFile(tuple(full), tuple(read_only), tuple(names.items()), tuple(worker),
                      tuple(worker_queues.items()))


TrustedProxies = int | tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None


def parse_trusted_proxies(raw: str) -> TrustedProxies:
    """HG_TRUSTED_PROXIES: empty (headers ignored), a count of proxies, or a comma list
    of addresses and CIDR ranges (headgate/web/proxies.py)."""
    raw = raw.strip()
    if not raw:
        return None
    if raw.isascii() and raw.isdigit():
        count = int(raw)
        if count < 1:
            raise ConfigError(f"HG_TRUSTED_PROXIES must be a count >= 1 or addresses, got {raw!r}")
        return count
    networks = []
    for item in raw.split(","):
        item = item.strip()
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(
                f"HG_TRUSTED_PROXIES must be a count or a comma list of addresses/CIDRs, "
                f"got {item!r}") from None
    return tuple(networks)


class StoreOptions(TypedDict, total=False):
    """``Settings.store_options()``: typed, so ``open_store(url, **options)`` checks."""
    migrate: bool
    notify: bool  # PostgreSQL only


@dataclass(frozen=True)
class Settings:
    store: str = "sqlite"
    sqlite_path: str = DEFAULT_SQLITE_PATH
    pg_url: str | None = None
    api_addr: str = DEFAULT_API_ADDR
    read_only: bool = False
    allow_remote: bool = False
    lease_ms: int = DEFAULT_LEASE_MS
    # For connection poolers that break LISTEN: workers then find work by polling only.
    pg_poll_only: bool = False
    # Kept out of repr so settings can be logged without leaking credentials.
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    # Bearer tokens that may only read (GET): support staff, dashboards on a wall.
    api_read_tokens: tuple[str, ...] = field(default=(), repr=False)
    # The console's session cookie is sent over HTTPS only (behind a TLS proxy).
    cookie_secure: bool = False
    # Failed token attempts an address may make in a minute (headgate/web/auth_throttle.py).
    auth_failures_per_minute: int = DEFAULT_AUTH_FAILURES_PER_MINUTE
    # Apply pending migrations when a process opens the store, so one command starts a
    # fresh install. Off: a schema behind the code is refused, for operators who migrate
    # as a separate, deliberate step.
    migrate: bool = True
    # Reverse proxies whose X-Forwarded-For / Forwarded headers name the client.
    trusted_proxies: TrustedProxies = None
    # How long the retention duty keeps history and latency buckets.
    history_retention_ms: int = DEFAULT_HISTORY_RETENTION_MS
    # How long the retention duty keeps the audit log of operator actions.
    audit_retention_ms: int = DEFAULT_AUDIT_RETENTION_MS
    # (token, name) pairs from the tokens file: whom the audit log names for a token.
    api_token_names: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # Tokens that may only use the worker protocol (register, claim, heartbeat, finish).
    api_worker_tokens: tuple[str, ...] = field(default=(), repr=False)
    # (token, queues): the queues a worker token may serve (unlisted tokens: any).
    api_worker_queues: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(),
                                                                       repr=False)

    def __post_init__(self) -> None:
        if self.store not in ("sqlite", "pg"):
            raise ConfigError(f"HG_STORE must be a store URL ({STORE_URL_FORMS}) or "
                              f"'sqlite' / 'pg' (with HG_SQLITE / HG_PG), got {self.store!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        tokens = _token_list(env.get("HG_API_TOKENS", ""))
        read_tokens = _token_list(env.get("HG_API_READ_TOKENS", ""))
        worker_tokens = _token_list(env.get("HG_API_WORKER_TOKENS", ""))
        tokens_file = env.get("HG_API_TOKENS_FILE", "").strip()
        token_names: tuple[tuple[str, str], ...] = ()
        worker_queues: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if tokens_file:
            from_file = read_tokens_file(tokens_file)
            tokens += from_file.full
            read_tokens += from_file.read_only
            worker_tokens += from_file.worker
            token_names = from_file.names
            worker_queues = from_file.worker_queues
        return cls(
            **_store_fields(env),
            api_addr=env.get("HG_API_ADDR", "").strip() or DEFAULT_API_ADDR,
            read_only=_bool(env, "HG_READ_ONLY"),
            allow_remote=_bool(env, "HG_API_ALLOW_REMOTE"),
            lease_ms=_positive_int(env, "HG_LEASE_MS", DEFAULT_LEASE_MS),
            pg_poll_only=_bool(env, "HG_PG_POLL_ONLY"),
            api_tokens=tokens,
            api_read_tokens=read_tokens,
            cookie_secure=_bool(env, "HG_COOKIE_SECURE"),
            auth_failures_per_minute=_positive_int(
                env, "HG_AUTH_FAILURES_PER_MINUTE", DEFAULT_AUTH_FAILURES_PER_MINUTE),
            migrate=_bool(env, "HG_MIGRATE", default=True),
            trusted_proxies=parse_trusted_proxies(env.get("HG_TRUSTED_PROXIES", "")),
            history_retention_ms=history_retention_ms_from_env(env),
            audit_retention_ms=audit_retention_ms_from_env(env),
            api_token_names=token_names,
            api_worker_tokens=worker_tokens,
            api_worker_queues=worker_queues,
        )

    def store_url(self) -> str:
        """The URL handed to ``headgate.open_store``."""
        if self.store == "pg":
            if not self.pg_url:
                raise ConfigError("HG_STORE=pg needs HG_PG (a postgresql:// URL)")
            return self.pg_url
        return f"sqlite:///{self.sqlite_path}"

    def store_options(self) -> StoreOptions:
        """Keyword options for ``headgate.open_store`` that the URL cannot carry."""
        options: StoreOptions = {}
        if not self.migrate:
            options["migrate"] = False
        if self.store == "pg" and self.pg_poll_only:
            options["notify"] = False
        return options

    def with_store_url(self, url: str, source: str = "--store") -> Settings:
        """Copy with the store chosen by a URL (``--store``, ``App(url)``) instead of the
        env; ``source`` is what an error names."""
        kind, where = _parse_store_url(url, source)
        if kind == "sqlite":
            return replace(self, store="sqlite", sqlite_path=where)
        return replace(self, store="pg", pg_url=where)

    def remote_bind_refusal(self, addr: str) -> str | None:
        """Why binding ``addr`` is refused (docs/api.md, Access), or None when it is allowed."""
        host, _ = split_addr(addr)
        if is_loopback_host(host) or self.allow_remote or self.api_tokens \
                or self.api_read_tokens or self.api_worker_tokens:
            return None
        return (
            f"refusing to listen on {addr}: it is not a loopback address and nothing "
            "authenticates requests. Set HG_API_TOKENS to require bearer tokens, or "
            "HG_API_ALLOW_REMOTE=1 if an upstream layer authenticates."
        )
