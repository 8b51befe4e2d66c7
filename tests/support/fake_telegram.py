"""A fake Telegram Bot API on 127.0.0.1, for driving a runtime's Telegram channel offline.

Hermes 0.19.0's Telegram platform (``plugins/platforms/telegram``, on
python-telegram-bot 22.6) takes a ``platforms.telegram.extra.base_url`` for a
locally hosted Bot API server, and OpenClaw 2026.9.6's Telegram channel (on
grammY) a ``channels.telegram.apiRoot`` (the root, without ``/bot<TOKEN>``); this
is such a server, in the harness's process. It speaks what the platforms use:
``getMe``, long-polled ``getUpdates`` (the updates a test pushes), and the
outbound methods, each recorded with its parameters (``sendMessage``,
``editMessageText``, ``sendMessageDraft``, ``sendChatAction``, ...). A recorded
call is the only thing the fake platform "shows a user": a test reads every text
the runtime ever sent, drafts and edits included.

Requests come as python-telegram-bot sends them (form fields or multipart, each
value JSON-encoded when it is not a plain string) or as grammY sends them (a JSON
body). The port is held by ``smf_assurance.ops.local.natsserver.PortReservation`` from start to
stop.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from smf_assurance.ops.local.natsserver import HOST, PortReservation

BOT = {
    "id": 700000001,
    "is_bot": True,
    "first_name": "SMF Test Bot",
    "username": "smf_test_bot",
    "can_join_groups": True,
    "can_read_all_group_messages": False,
    "supports_inline_queries": False,
}
TOKEN = "700000001:offline-test-token"
"""A token of the Bot API's shape; it grants nothing anywhere (the fake checks it)."""
LONG_POLL_CAP_S = 2.0
"""At most this long a ``getUpdates`` waits for an update before answering empty."""
SILENT_METHODS = frozenset({"getUpdates", "getMe"})


@dataclass
class Sent:
    """One outbound call Hermes made, as the fake platform saw it."""

    method: str
    params: dict[str, Any]
    at_ms: int

    @property
    def text(self) -> str:
        value = self.params.get("text", self.params.get("caption", ""))
        return value if isinstance(value, str) else json.dumps(value)


@dataclass
class _State:
    updates: list[dict[str, Any]] = field(default_factory=list)
    next_update_id: int = 1
    next_message_id: int = 100
    sent: list[Sent] = field(default_factory=list)
    polls: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class FakeTelegram:
    """``await FakeTelegram().start()``; Hermes's ``base_url`` is :attr:`base_url`."""

    def __init__(self) -> None:
        self.state = _State()
        self._reservation = PortReservation()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self._reservation.port}/bot"

    async def start(self) -> FakeTelegram:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self._reservation.port, reuse_address=True)
        await site.start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._reservation.close()

    def reset(self) -> None:
        """Forget what was sent and queued (between runs; polls are counted afresh)."""
        self.state = _State()

    # -- the test side ------------------------------------------------------------------

    def push_text(self, chat: dict[str, Any], user_id: int, text: str) -> int:
        """Queue a text message from ``user_id`` in ``chat``; returns its message id."""
        state = self.state
        message_id = state.next_message_id
        state.next_message_id += 1
        sender = {"id": user_id, "is_bot": False, "first_name": "Client", "username": "client"}
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            "text": text,
        }
        mention = f"@{BOT['username']}"
        if text.startswith(mention):
            message["entities"] = [{"type": "mention", "offset": 0, "length": len(mention)}]
        state.updates.append({"update_id": state.next_update_id, "message": message})
        state.next_update_id += 1
        state.wake.set()
        return message_id

    def sent(self, chat_id: int | None = None) -> list[Sent]:
        return [
            s
            for s in self.state.sent
            if chat_id is None or str(s.params.get("chat_id")) == str(chat_id)
        ]

    # -- the Bot API side -------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = {k: _value(v) for k, v in request.query.items()}
        if request.can_read_body:
            kind = request.content_type
            if kind == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    params.update(body)
            elif kind.startswith("multipart/"):
                reader = await request.multipart()
                async for part in reader:
                    if part.name and part.filename is None:  # type: ignore[union-attr]
                        params[part.name] = _value(await part.text())  # type: ignore[union-attr]
            else:
                form = await request.post()
                params.update({k: _value(v) for k, v in form.items() if isinstance(v, str)})
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        method = request.match_info["method"]
        params = await self._params(request)
        if method not in SILENT_METHODS:
            self.state.sent.append(Sent(method, params, time.time_ns() // 1_000_000))
        result = await self._result(method, params)
        return web.json_response({"ok": True, "result": result})

    async def _result(self, method: str, params: dict[str, Any]) -> Any:
        state = self.state
        if method == "getMe":
            return BOT
        if method == "getUpdates":
            state.polls += 1
            offset = int(params.get("offset") or 0)
            state.updates = [u for u in state.updates if u["update_id"] >= offset]
            if not state.updates:
                state.wake.clear()
                wait = min(float(params.get("timeout") or 0), LONG_POLL_CAP_S)
                if wait > 0:
                    try:
                        await asyncio.wait_for(state.wake.wait(), wait)
                    except TimeoutError:
                        return []
            return list(self.state.updates)
        if method in {"sendMessage", "sendRichMessage", "editMessageText"}:
            chat_id = params.get("chat_id")
            message_id = params.get("message_id")
            if message_id is None:
                message_id = state.next_message_id
                state.next_message_id += 1
            chat_type = "private" if int(chat_id or 0) > 0 else "group"
            return {
                "message_id": int(message_id),
                "date": int(time.time()),
                "chat": {"id": int(chat_id or 0), "type": chat_type},
                "from": {k: BOT[k] for k in ("id", "is_bot", "first_name", "username")},
                "text": str(params.get("text", "")),
            }
        if method == "getChat":
            chat_id = int(params.get("chat_id") or 0)
            return {"id": chat_id, "type": "private" if chat_id > 0 else "group"}
        if method == "getMyCommands":
            return []
        return True
