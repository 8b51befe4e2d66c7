"""A recording HTTP endpoint on 127.0.0.1: the fake downstream of a consequential MCP tool.

Shared by the runtime harnesses (tests/support/hermes_harness.py,
tests/support/openclaw_harness.py):
the test MCP server's ``send_notice`` tool POSTs JSON here, and the harness reports
what arrived. It stands for a system outside ours (a firm's notice service), so a
test can show a refused call never reached it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from smf_assurance.ops.local.natsserver import HOST, PortReservation


class NoticeSink:
    """A recording HTTP endpoint on 127.0.0.1: what an MCP server's tool sends onwards
    (the fake downstream of a consequential MCP tool). The port is reserved from start
    to stop."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self._reservation = PortReservation()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._reservation.port}/notices"

    async def start(self) -> NoticeSink:
        app = web.Application()
        app.router.add_post("/notices", self._notice)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, HOST, self._reservation.port, reuse_address=True).start()
        return self

    async def _notice(self, request: web.Request) -> web.Response:
        self.received.append(await request.json())
        return web.json_response({"ok": True})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._reservation.close()

    def take(self) -> list[dict[str, Any]]:
        taken, self.received = self.received, []
        return taken
