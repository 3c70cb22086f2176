"""What a store offers beyond what every store must, asked once.

Services read `store.capabilities()` instead of probing the store's class for a method
(`getattr`, `hasattr`): an adapter says what it does, and a method the port gives a
default for (`change_token`, `enqueue_many_in`, which refuse) is only called when the
flag says the adapter has it. What every store must do (acks in one transaction, acks
with the next claims, bulk operations) is the port's abstract methods, not a flag."""

from __future__ import annotations

from dataclasses import dataclass

# The flags GET /api/v1/system lists, in its order.
ADVERTISED = ("transactional", "notifying", "inspect")


@dataclass(frozen=True, slots=True)
class Capabilities:
    # enqueue_many_in with the caller's own driver connection (psycopg): `conn=` on
    # Client.enqueue for an enqueue inside the application's transaction.
    transactional: bool = False
    # `activity` hears other processes' commits too (PostgreSQL's LISTEN).
    notifying: bool = False
    # The reads the console and the API use (Inspection).
    inspect: bool = True
    # change_token(): a cheap value that moves when any process commits (SQLite's
    # data_version), for idle workers and live views between polls.
    change_token: bool = False
    # enqueue_many_in inside a write transaction the store itself opened
    # (idempotent_write's `conn`): an HTTP enqueue and its key commit together.
    enqueue_many_in: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The advertised flags that are set, as GET /api/v1/system lists them."""
        return tuple(name for name in ADVERTISED if getattr(self, name))

__all__ = ["ADVERTISED", "Capabilities"]
