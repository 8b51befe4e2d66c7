"""Telling entitled approvers that an approval waits.

A pending approval expires after its TTL unless an approver happens to look.
The notifier reads the announcements the gate already publishes on
``smf.approval.pending.<tenant>`` and sends each *entitled* approver (the
console's and the gate's rule, :func:`smf_assurance.approver.console.access.entitled`) one
e-mail and one signed webhook, and one reminder before expiry while the
approval is still pending. It is an edge like the console: it depends on
``subjects/`` and this package only, holds no signing key and signs nothing
the gate verifies, and the gate never waits on it.

- :mod:`smf_assurance.approver.notify.config`: the operator's TOML file, secrets from files or env.
- :mod:`smf_assurance.approver.notify.notice`: what a notification says (a link, never content).
- :mod:`smf_assurance.approver.notify.channels`: SMTP and signed Slack/Teams webhooks.
- :mod:`smf_assurance.approver.notify.sent`: the SQLite record of what was sent (no repeat on
restart).
- :mod:`smf_assurance.approver.notify.service`: the loop that ties them together.
"""
