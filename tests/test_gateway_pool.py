"""The gateway's upstream pools let go of the connections they can no longer use: a pool is
used again only by a later request to its origin, which a run may never make (a replay arm's
URL names one task), so an idle connection past ``IDLE_SECONDS`` is closed by a sweep, not
kept open until the gateway stops (one open connection a task and arm, with its buffers,
grew a long run's memory). A real local HTTP server answers."""

from __future__ import annotations

import asyncio
import time

from support.scripted_server import Answer, ScriptedServer

from assay.models.gateway import http
from assay.models.gateway.http import UpstreamPool


def test_a_stale_idle_connection_is_closed_by_the_sweep_and_a_fresh_one_kept() -> None:
    with ScriptedServer(lambda req, n: Answer("hi")) as srv:
        async def scenario() -> tuple[int, int, bool]:
            pool = UpstreamPool(srv.base_url, connect_timeout=5, read_timeout=5)
            body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
            res = await pool.request("POST", "/chat/completions",
                                     [("Content-Type", "application/json")], body)
            await res.read()
            res.aclose()  # the whole answer read: back to the pool, idle
            fresh = pool.close_stale()  # just released: kept for the next request
            conn = pool._idle[0]
            conn.idle_since = time.monotonic() - http.IDLE_SECONDS - 1
            stale = pool.close_stale()
            await asyncio.sleep(0)
            return fresh, stale, conn.writer.is_closing()

        fresh, stale, closed = asyncio.run(scenario())
    assert (fresh, stale, closed) == (1, 0, True)
