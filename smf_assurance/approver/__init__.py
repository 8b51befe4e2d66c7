"""The approver's side of the gate: an edge beside the runtime adapters.

ARCHITECTURE.md, "Layers of the code": the approver client, the reader of
held approvals and the approvers' web console depend on ``subjects/`` only
(plus this package), like the runtime adapters, so they install where an
approver works without the gate. The command line in ``smf_assurance/ops/cli/commands``
(``approvals``, ``console``) is a thin front end over this package.

- :mod:`smf_assurance.approver.client`: sign a show request and an allow-once or deny.
- :mod:`smf_assurance.approver.pending`: what has been held (the ``SMF_APPROVALS`` stream)
  and where each approval stands (``smf.approval.status``).
- :mod:`smf_assurance.approver.console`: the web console (docs/CONSOLE.md).
"""
