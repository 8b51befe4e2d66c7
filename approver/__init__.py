"""The approver's side of the gate: an edge beside the runtime adapters.

ARCHITECTURE.md, "Layers of the code": the approver client, the reader of
held approvals and the approvers' web console depend on ``subjects/`` only
(plus this package), like the runtime adapters, so they install where an
approver works without the gate. The command line in ``ops/commands``
(``approvals``, ``console``) is a thin front end over this package.

- :mod:`approver.client`: sign a show request and an allow-once or deny.
- :mod:`approver.pending`: what has been held (the ``SMF_APPROVALS`` stream)
  and where each approval stands (``smf.approval.status``).
- :mod:`approver.console`: the web console (issue 12, docs/CONSOLE.md).
"""
