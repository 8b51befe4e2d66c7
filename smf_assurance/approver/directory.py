"""The tenant directory: display names the operator keeps for what approvers read.

An approver reads the exact action as a lawyer would: the destination in a
display form (court name, case caption and docket for a filing; recipient name
and address for e-mail) and the matter and client by name, "from a tenant
directory the operator maintains (never in the ledger)".

What this module keeps true:

- The directory is operator data, one TOML file per tenant in one folder
  (``<state>/directory/<tenant>.toml`` by default); it is read by the console
  and ``approvals show`` and nothing else. Nothing here is written to the
  evidence ledger or published on the bus: display names are not part of the
  binding and change nothing that is approved.
- A name is shown only for an id the directory holds; an id it does not know
  is shown as the raw id with ``in_directory = false``, never guessed from a
  near match, another tenant's file or another case.
- A file that breaks any rule is refused as a whole, with one line naming the
  file and the key (:class:`DirectoryError`); a reader never runs on half a
  directory.

Example (``tenant-acme.toml``)::

    schema = "smf.tenant-directory/1"
    tenant_id = "tenant-acme"

    [courts.sdny]
    name = "U.S. District Court, Southern District of New York"

    [matters.matter-acme-globex]
    name = "Acme v. Globex (discovery)"
    client = "Acme Corporation"

    [matters.matter-acme-globex.cases.sdny]
    caption = "Acme Corp. v. Globex Inc."
    docket = "1:26-cv-01234 (JMF)"

    [recipients."counsel@globex.example"]
    name = "Dana Whitfield, counsel for Globex"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.approver.toml_file import read_toml
from smf_assurance.subjects import names

SCHEMA: Final = "smf.tenant-directory/1"
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
Channel = str
DestinationKind = Literal["court", "recipient", "other"]
KIND_OF_CHANNEL: Final[dict[str, DestinationKind]] = {
    "electronic_filing": "court",
    "email": "recipient",
}
"""Which directory section names a destination on each channel; any other channel's
address is shown as given."""


class DirectoryError(ValueError):
    """The directory cannot be used; the message is one line naming the file and key."""


class Court(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: Text


class Case(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A matter's case before one court."""

    caption: Text
    docket: Text


class Matter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: Text
    client: Text
    cases: dict[str, Case] = {}


class Recipient(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: Text


class TenantDirectory(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.tenant-directory/1"]
    tenant_id: Text
    courts: dict[str, Court] = {}
    matters: dict[str, Matter] = {}
    recipients: dict[str, Recipient] = {}


class DestinationShown(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The destination as the directory names it; ``id`` is always the raw address."""

    id: str
    kind: DestinationKind
    in_directory: bool
    name: str | None = None
    caption: str | None = None
    """For a court: the matter's case there, when the directory holds one."""
    docket: str | None = None


class MatterShown(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    in_directory: bool
    name: str | None = None
    client: str | None = None


class DirectoryShown(msgspec.Struct, frozen=True, kw_only=True):
    """What a reader shows beside the binding's raw ids; never part of the binding."""

    destination: DestinationShown
    matter: MatterShown


@dataclass(frozen=True, slots=True)
class Directory:
    """Every tenant's directory, by tenant id; empty when the operator keeps none."""

    tenants: Mapping[str, TenantDirectory] = field(default_factory=dict)

    def shown(
        self, tenant_id: str, matter_id: str, address: str, channel: Channel | None
    ) -> DirectoryShown:
        """The display form of one held action's destination and matter.

        ``channel`` (from the pending announcement) says which section names the
        address; ``None`` (a reader that does not know it) looks the address up as a
        court, then as a recipient. Only the action's own tenant's file is read.
        """
        own = self.tenants.get(tenant_id)
        matter = own.matters.get(matter_id) if own is not None else None
        matter_shown = (
            MatterShown(id=matter_id, in_directory=True, name=matter.name, client=matter.client)
            if matter is not None
            else MatterShown(id=matter_id, in_directory=False)
        )
        return DirectoryShown(
            destination=_destination(own, matter, address, channel), matter=matter_shown
        )


def _destination(
    own: TenantDirectory | None, matter: Matter | None, address: str, channel: Channel | None
) -> DestinationShown:
    kind = KIND_OF_CHANNEL.get(channel, "other") if channel is not None else None
    if own is not None and kind in ("court", None) and address in own.courts:
        case = matter.cases.get(address) if matter is not None else None
        return DestinationShown(
            id=address,
            kind="court",
            in_directory=True,
            name=own.courts[address].name,
            caption=case.caption if case is not None else None,
            docket=case.docket if case is not None else None,
        )
    if own is not None and kind in ("recipient", None) and address in own.recipients:
        return DestinationShown(
            id=address, kind="recipient", in_directory=True, name=own.recipients[address].name
        )
    return DestinationShown(id=address, kind=kind or "other", in_directory=False)


def load_tenant(path: Path) -> TenantDirectory:
    """One tenant's file, checked whole: TOML, the schema, no unknown key, the file
    named after its ``tenant_id`` (so a copied file cannot speak for another
    tenant), and every case at a court the same file names."""
    tenant = read_toml(path, TenantDirectory, DirectoryError)
    try:
        names.token(tenant.tenant_id)
    except names.SubjectError as exc:
        raise DirectoryError(f"{path}: tenant_id is not a tenant id") from exc
    if path.stem != tenant.tenant_id:
        raise DirectoryError(f"{path}: tenant_id {tenant.tenant_id!r} is not the file's name")
    for matter_id, matter in tenant.matters.items():
        for court_id in matter.cases:
            if court_id not in tenant.courts:
                raise DirectoryError(
                    f"{path}: matters.{matter_id}.cases.{court_id}: no [courts.{court_id}]"
                )
    return tenant


def load_directory(folder: Path | None) -> Directory:
    """Every ``*.toml`` in ``folder``; none (or no folder) is an empty directory, in
    which every id is shown raw and marked as not in the directory."""
    if folder is None or not folder.exists():
        return Directory()
    if not folder.is_dir():
        raise DirectoryError(f"{folder} is not a folder")
    return Directory({t.tenant_id: t for t in map(load_tenant, sorted(folder.glob("*.toml")))})
