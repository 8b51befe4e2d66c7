"""The gate operator's word on notices: which tenants' notices may carry words.

``<state>/notices.toml``, written by the operator, read when the gate starts::

    # The tenants whose approvals a notice may name by matter, destination and
    # document (smf_assurance.pipeline.chain.summaries). Absent: none, every
    # notice content-free.
    content_tenants = ["tenant-acme"]

The notifier's own configuration must opt the tenant in as well (``content = true``
under the tenant): either side alone keeps its notices content-free. A file that is not
this refuses the start, in one line naming it: the gate never starts on a setting it
could not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec

from smf_assurance.approver.toml_file import read_toml
from smf_assurance.subjects.patterns import Token

NOTICES_FILE: Final = "notices.toml"


class NoticesError(ValueError):
    """The notices file cannot be used; the message names the file."""


class _Notices(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    content_tenants: tuple[Token, ...] = ()


def notice_content_tenants(root: Path) -> frozenset[str]:
    """The tenants ``root/notices.toml`` opts in; none when there is no such file."""
    path = root / NOTICES_FILE
    if not path.exists():
        return frozenset()
    return frozenset(read_toml(path, _Notices, NoticesError).content_tenants)
