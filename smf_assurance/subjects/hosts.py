"""Whether an address stays on this machine: the one rule for what may go in clear.

Plain TCP and plain HTTP are for loopback only; whatever crosses a network is TLS
(docs/OPERATIONS.md, "TLS"). The servers we run (the console, the model gateway)
and the URLs we are given (a notifier's webhook) ask this one question.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a listen address or a URL's host) is this machine's loopback
    only: ``localhost`` or a loopback IP address. A name is not resolved (what it
    resolves to may change), and ``0.0.0.0`` or ``::`` (every interface) is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
