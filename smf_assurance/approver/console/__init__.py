"""The approvers' web console: a page, a roster-gated list, a relay that holds no key.

``server`` serves the static page in ``static/`` and relays the approver's
signed requests to the gate; ``docs/CONSOLE.md`` explains the design and what
it does and does not guarantee. The approver's Ed25519 key lives only in the
page (WebCrypto); this package never signs anything.
"""
