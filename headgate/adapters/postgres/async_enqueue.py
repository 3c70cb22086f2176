"""asyncio producers on PostgreSQL: the same one-statement enqueue as enqueue.py,
sent over psycopg's AsyncConnection, from an AsyncConnectionPool opened on first use
or inside a caller's own AsyncConnection transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import psycopg_pool

from headgate.adapters.shared.enqueue_rows import EnqueueResult
from headgate.core import Envelope

from .connection import ADAPTERS
from .enqueue import (
    ENQUEUE_MANY,
    ENQUEUE_ONE,
    ENQUEUE_PLAIN,
    _plain_params,
    _row,
    check_ids,
    columns,
    inserted_plainly,
    plain,
    result,
)
from .outage import unavailable

POOL_MAX = 4


async def call(raw: psycopg.AsyncConnection, envs: Sequence[Envelope],
               origin: str | None) -> EnqueueResult:
    """enqueue.call over an async connection, in whatever transaction it is in."""
    check_ids(envs)
    if len(envs) == 1:
        env = envs[0]
        if plain(env):
            cur = await raw.execute(ENQUEUE_PLAIN, _plain_params(env, origin))
            first = await cur.fetchone()
            if first is not None and first[0]:
                return inserted_plainly(env)
        cur = await raw.execute(ENQUEUE_ONE, [*_row(env), origin])
    else:
        cur = await raw.execute(ENQUEUE_MANY, [*columns(envs), origin])
    return result(envs, await cur.fetchone())


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
            self.url, min_size=1, max_size=POOL_MAX, open=False,
            kwargs={"autocommit": True, "context": ADAPTERS})
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
                           conn: psycopg.AsyncConnection | None) -> EnqueueResult:
        try:
            if conn is not None:
                return await call(conn, envs, origin)
            pool = await self.pool()
            async with pool.connection() as own:
                return await call(own, envs, origin)
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from exc
        except psycopg_pool.PoolTimeout as exc:
            raise unavailable(exc) from exc

    async def aclose(self) -> None:
        """Close the pool, when it belongs to the running loop."""
        if self._pool is not None and self._loop is asyncio.get_running_loop():
            await self._pool.close()
        self._pool = self._loop = None


__all__ = ["AsyncProducer", "call"]
