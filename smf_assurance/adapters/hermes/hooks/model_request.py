"""The ``llm_request`` middleware: every model request proves which process sent it.

Issue 16 (docs/HERMES.md, finding 10): the model gateway used to serve a
runtime by its token while the gate held a fresh attestation for the runtime
id, so a second Hermes process of the same runtime with our plugin off
(``HERMES_SAFE_MODE=1``, or the plugin left out of ``plugins.enabled``), started
within that lease, got completions and ran its first tool ungated. The token
lives in Hermes's ``config.yaml``, which every process of the runtime reads;
the runtime key is held only by this adapter.

So the adapter draws a random instance id at start, attests it
(``Lifecycle.attestation``), and adds an :class:`InstanceProof` signed with
the runtime key to every request of the agent loop, as the HTTP header
``Smf-Instance-Proof`` (``extra_headers``: Hermes applies ``llm_request``
middleware to the provider kwargs before it sends them,
``agent/conversation_loop.py`` 0.19.0, and the OpenAI client sends
``extra_headers`` as headers). A process without this middleware sends no
proof and the gateway refuses it. A middleware that raises is skipped by
Hermes and the request goes without the header: that fails closed at the
gateway, so nothing here can let a request through that should not be.

A proof is sealed once and reused for :data:`PROOF_REUSE_MS` (an Ed25519
signature per request is not needed: the gate accepts a proof within its
freshness window only, 120 s by default).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from smf_assurance.adapters.hermes.lifecycle import Lifecycle
from smf_assurance.subjects import names
from smf_assurance.subjects.model_gateway import InstanceProof, seal_instance_proof

log = logging.getLogger("smf.hermes")

PROOF_REUSE_MS: Final = 30_000
"""Well inside the gate's freshness window, so a reused proof is never stale there."""


class ModelRequestMiddleware(Lifecycle):
    def llm_request(self, **kwargs: Any) -> dict[str, Any] | None:
        """The provider kwargs with this process's proof among their headers; None
        (the request goes unchanged, and the gateway refuses it) when there is no
        runtime key to prove with."""
        request = kwargs.get("request")
        if self.config is None or not isinstance(request, dict):
            return None
        try:
            headers = dict(request.get("extra_headers") or {})
            headers[names.HEADER_INSTANCE_PROOF] = self.instance_proof()
            return {"request": {**request, "extra_headers": headers}}
        except Exception as exc:  # noqa: BLE001 - the request then carries no proof: refused
            log.error("smf instance proof not added: %s", type(exc).__name__)
            return None

    def instance_proof(self) -> str:
        """This process's sealed proof, sealed again once it is :data:`PROOF_REUSE_MS` old
        (Hermes's subagents call from their own threads)."""
        assert self.config is not None
        now = self.clock()
        with self._proof_lock:
            if self._proof is not None and now - self._proof[0] < PROOF_REUSE_MS:
                return self._proof[1]
            proof = InstanceProof(
                schema="smf.instance-proof/1",
                runtime_id=self.config.runtime_id,
                instance_id=self.instance_id,
                issued_at_ms=now,
            )
            sealed = seal_instance_proof(proof, self.config.key)
            self._proof = (now, sealed)
            return sealed
