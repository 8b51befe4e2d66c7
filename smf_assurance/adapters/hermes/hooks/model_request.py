"""The ``llm_request`` middleware: every model request proves which process sent it.

The attack refused (docs/HERMES.md, finding 10): a second Hermes process of a
runtime that holds a fresh attestation, started with our plugin off
(``HERMES_SAFE_MODE=1``, or the plugin left out of ``plugins.enabled``), must
not get completions, and so run its first tool ungated, by the runtime's token
alone. The token lives in Hermes's ``config.yaml``, which every process of the
runtime reads; the runtime key is held only by this adapter.

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

Each request gets its own proof (proofs are bound to one request): a fresh
nonce, and the digest of the request's ``messages`` as this middleware hands them to
Hermes's OpenAI client (``subjects.model_gateway.request_digest``; the client sends
them as they are, and the gateway computes the same digest from the body it
receives). The gate accepts it once and within seconds, so a proof captured on the
way is good for nothing but that one request. Messages with no canonical form (a
float) get no proof: the gateway refuses that request (fails closed). An Ed25519
signature per request costs tens of microseconds.
"""

from __future__ import annotations

import logging
from typing import Any

from smf_assurance.adapters.hermes.lifecycle import Lifecycle
from smf_assurance.subjects import names
from smf_assurance.subjects.model_gateway import (
    InstanceProof,
    new_proof_nonce,
    request_digest,
    seal_instance_proof,
)

log = logging.getLogger("smf.hermes")


class ModelRequestMiddleware(Lifecycle):
    def llm_request(self, **kwargs: Any) -> dict[str, Any] | None:
        """The provider kwargs with a proof of this process, for these very messages,
        among their headers; None (the request goes unchanged, and the gateway refuses
        it) when there is no runtime key to prove with or the messages cannot be
        digested."""
        request = kwargs.get("request")
        if self.config is None or not isinstance(request, dict):
            return None
        try:
            headers = dict(request.get("extra_headers") or {})
            headers[names.HEADER_INSTANCE_PROOF] = self.instance_proof(
                request_digest(request.get("messages"))
            )
            return {"request": {**request, "extra_headers": headers}}
        except Exception as exc:  # noqa: BLE001 - the request then carries no proof: refused
            log.error("smf instance proof not added: %s", type(exc).__name__)
            return None

    def instance_proof(self, digest: str | None = None) -> str:
        """A sealed proof of this process for one request (its messages' digest), with
        a fresh nonce: never reused."""
        assert self.config is not None
        proof = InstanceProof(
            schema="smf.instance-proof/1",
            runtime_id=self.config.runtime_id,
            instance_id=self.instance_id,
            issued_at_ms=self.clock(),
            nonce=new_proof_nonce(),
            request_digest=digest,
        )
        return seal_instance_proof(proof, self.config.key)
