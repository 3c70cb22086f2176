"""asyncio producers on PostgreSQL: the same one-statement enqueue as enqueue.py,
sent over psycopg's AsyncConnection, from an AsyncConnectionPool opened on first use
or inside a caller's own AsyncConnection transaction.

Batches holding a unique key take the shared SQL (per-key locks, holder replacement),
which is synchronous: without a caller's connection they run in a thread; inside one
they are refused, since the shared code cannot join an async transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import psycopg_pool

from headgate.core import Envelope, InvalidInput

from .enqueue import (
    ENQUEUE_MANY,
    ENQUEUE_ONE,
    ENQUEUE_PLAIN,
    _columns,
    _plain_params,
    _row,
    received,
)
from .outage import unavailable

POOL_MAX = 4


async def call(raw: psycopg.AsyncConnection, envs: Sequence[Envelope],
               origin: str | None) -> None:
    """enqueue.call over an async connection, in whatever transaction it is in."""
    ids = [e.id for e in envs]
    if len(set(ids)) != len(ids):
        raise InvalidInput("batch contains the same id twice")
    if len(envs) == 1:
        env = envs[0]
        cur = await raw.execute(ENQUEUE_PLAIN, _plain_params(env, origin))
        first = await cur.fetchone()
        if first is not None and first[0]:
            return
        cur = await raw.execute(ENQUEUE_ONE, [*_row(env), origin])
    else:
        cur = await raw.execute(ENQUEUE_MANY, [*_columns(envs), origin])
    received(await cur.fetchone())


class AsyncProducer:
    """The store's async side: a small pool, opened by the first enqueue of the event
    loop it is used on (a pool belongs to one loop)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def pool(self) -> psycopg_pool.AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        pool = psycopg_pool.AsyncConnectionPool(
            self.url, min_size=1, max_size=POOL_MAX, open=False, kwargs={"autocommit": True})
        try:
            await pool.open(wait=True, timeout=10)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            await pool.close()
            raise unavailable(exc) from exc
        if self._pool is not None and self._loop is loop:  # a concurrent first call won
            await pool.close()
            return self._pool
        # A pool of an earlier loop cannot be closed from this one; it ended with it.
        self._pool, self._loop = pool, loop
        return pool

    async def enqueue_many(self, envs: Sequence[Envelope], origin: str | None,
                           conn: psycopg.AsyncConnection | None) -> list[str]:
        try:
            if conn is not None:
                await call(conn, envs, origin)
            else:
                pool = await self.pool()
                async with pool.connection() as own:
                    await call(own, envs, origin)
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        except psycopg_pool.PoolTimeout as exc:
            raise unavailable(exc) from exc
        return [e.id for e in envs]  # type: ignore[misc]

    async def aclose(self) -> None:
        """Close the pool, when it belongs to the running loop."""
        if self._pool is not None and self._loop is asyncio.get_running_loop():
            await self._pool.close()
        self._pool = self._loop = None


__all__ = ["AsyncProducer", "call"]
