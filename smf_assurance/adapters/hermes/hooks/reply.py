"""``transform_llm_output``: only the text the output gate released reaches the user.

A ``transform_llm_output`` that raises or returns ``None`` delivers the
ORIGINAL text (RUNTIMES.md, "FAIL-OPEN"), so this hook always returns a
string: the released text on ``allow`` (and only when it is the text that was
gated), a withheld notice otherwise. The reply is streamed to the buffer
stage in chunks and gated as one egress operation (ARCHITECTURE.md, "One
proposal through the bus").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from nats.aio.client import Client

from smf_assurance.adapters.hermes import mapping
from smf_assurance.adapters.hermes.bridge import BridgeError
from smf_assurance.adapters.hermes.config import ADAPTER_ID
from smf_assurance.adapters.hermes.lifecycle import Lifecycle
from smf_assurance.adapters.hermes.refusing import WITHHELD_INTERNAL, withheld_notice
from smf_assurance.adapters.output import OutputStreamer
from smf_assurance.subjects.envelope import Surface
from smf_assurance.subjects.messages import OutputVerdict

log = logging.getLogger("smf.hermes")

OUTPUT_CHUNK_BYTES: Final = 16 * 1024


class ReplyHook(Lifecycle):
    def transform_llm_output(self, **kwargs: Any) -> str:
        """The gate's released text on ``allow``; a withheld notice otherwise. Never raises.

        Never returns None: None would let Hermes deliver the original text.
        """
        try:
            return self._transform(kwargs)
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            try:
                log.exception("smf transform_llm_output failed")
            finally:
                return WITHHELD_INTERNAL  # noqa: B012 - withheld whatever logging does

    def _transform(self, kwargs: Mapping[str, Any]) -> str:
        text = kwargs.get("response_text")
        if not isinstance(text, str):
            return withheld_notice(("reply_not_text",))
        if self.problems or self.config is None or self.bridge is None:
            return withheld_notice(tuple(self.problems) or ("adapter_not_configured",))
        config = self.config
        session = str(kwargs.get("session_id") or "")
        platform = str(kwargs.get("platform") or "")
        destination = mapping.reply_destination(config.context, platform)
        facts = mapping.session_facts(config.context, self.taint.is_tainted(session))
        surface: Surface = (
            "gateway_delivery" if platform not in ("", "cli", "local") else "direct_reply"
        )
        raw = text.encode("utf-8")
        chunks = [raw[i : i + OUTPUT_CHUNK_BYTES] for i in range(0, len(raw), OUTPUT_CHUNK_BYTES)]
        self._ensure_attested()
        refusal = self._release_in_force()
        if refusal is not None:
            return withheld_notice((refusal,))

        async def gate_it(nc: Client) -> OutputVerdict:
            streamer = OutputStreamer(
                nc,
                config.key,
                config.runtime_id,
                self._runtime_version(),
                ADAPTER_ID,
                timeout=config.gate_timeout,
                gate_keys=self._gate_keys(),
            )
            return await streamer.stream(
                chunks,
                actor=config.context.actor,
                facts=facts,
                destination=destination,
                surface=surface,
            )

        try:
            result = self.bridge.call(gate_it, config.gate_timeout + 1.0)
        except BridgeError as exc:
            return withheld_notice((exc.reason_code,))
        verdict = result.verdict
        if verdict.outcome == "allow" and result.released == text:
            return result.released
        if verdict.outcome == "allow":
            return withheld_notice(("released_text_mismatch",))
        return withheld_notice(verdict.reason_codes or ("no_reason_given",), verdict.outcome)
