"""Adapter-provided, connector-backed Hermes tools: approval that works on Hermes.

Hermes cannot hold a native tool call for later approval (RUNTIMES.md), so
the adapter's profile stays block-only for everything Hermes executes
itself. These tools are different: their handler executes NOTHING locally.
It sends one signed Proposal whose tool the gate's mapper table
(``smf_assurance/pipeline/mappers/smf-hermes-adapter.json``) maps to a connector, and
returns the gate's verdict to the model as text:

- ``held``: the gate persisted an exact-action approval binding; an
  entitled approver (a licensed attorney) may allow it once, and only then
  does the gate's dispatch publish ONE order to that connector. The text
  says held, with the approval id and expiry; it never says the action
  happened.
- ``deny``: the reason codes; nothing was done.
- ``allow`` (no approval needed): the order id handed to the connector; the
  connector reports the outcome to the gate, not to this tool.

Each call is a new proposal (a new proposal id), so calling the tool again
asks again and gets its own hold: an approval is bound to one proposal's
binding and is never reused.

This module is pure: the tool table, argument checks, the proposal's parts,
and the texts. ``smf_assurance.adapters.hermes.plugin`` registers the tools
(``PluginContext.register_tool``, ``hermes_cli/plugins.py`` 0.19.0) and
sends the proposals.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from smf_assurance.adapters.hermes.mapping import HermesContext, MappingError
from smf_assurance.adapters.hermes.refusing import decision_hint
from smf_assurance.subjects.messages import ProposedDestination, Verdict

TOOLSET: Final = "smf_connectors"
"""The Hermes toolset the tools are registered in (enable it with ``--toolsets``)."""
MAX_TEXT: Final = 64 * 1024
MAX_NAME: Final = 256


@dataclass(frozen=True, slots=True)
class ConnectorCall:
    """What a call proposes besides the actor and the session facts."""

    arguments: dict[str, Any]
    content: str
    destination: ProposedDestination
    legal_hold: bool | None


@dataclass(frozen=True, slots=True)
class ConnectorTool:
    name: str
    connector: str
    """The connector the gate's mapper table names for this tool (documentation only:
    the gate decides where an order goes, never the adapter)."""
    description: str
    parameters: Mapping[str, tuple[str, int]]
    """Argument name -> (description, max length); every argument is required text."""
    nothing_yet: str
    """What the held/denied text says did not happen, e.g. "Nothing has been filed"."""

    def schema(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": {
                    name: {"type": "string", "description": text}
                    for name, (text, _) in self.parameters.items()
                },
                "required": list(self.parameters),
                "additionalProperties": False,
            },
        }

    def checked(self, args: object) -> dict[str, str]:
        """The arguments, exactly the declared ones, each non-empty bounded text."""
        if not isinstance(args, dict):
            raise MappingError("arguments_not_an_object")
        unknown = sorted(set(args) - set(self.parameters))
        if unknown:
            raise MappingError("unknown_argument", ",".join(str(u)[:64] for u in unknown))
        checked: dict[str, str] = {}
        for name, (_, limit) in self.parameters.items():
            value = args.get(name)
            if not isinstance(value, str) or not value.strip():
                raise MappingError("missing_required_argument", name)
            if len(value) > limit:
                raise MappingError("argument_too_long", name)
            checked[name] = value
        return checked


def _court_filing(args: Mapping[str, str], context: HermesContext) -> ConnectorCall:
    return ConnectorCall(
        arguments={"court": args["court"], "document": args["document"]},
        content=args["text"],
        destination=ProposedDestination(address=args["court"], locality="external"),
        legal_hold=None,
    )


def _dms_delete(args: Mapping[str, str], context: HermesContext) -> ConnectorCall:
    held = context.legal_hold_documents
    document = args["document_id"]
    return ConnectorCall(
        arguments={"document_id": document},
        content="",
        destination=ProposedDestination(address=document, locality="internal"),
        # unknown unless the operator listed the held documents: the gate then
        # refuses the deletion (missing_required_fact), never guesses "not held"
        legal_hold=None if held is None else document in held,
    )


COURT_FILING: Final = ConnectorTool(
    name="smf_court_filing",
    connector="court-efiling",
    description=(
        "File a document with a court through the firm's e-filing connector. The SMF "
        "Assurance gate decides; a filing usually needs a licensed attorney's approval, "
        "in which case this tool returns HELD with an approval id and nothing is filed "
        "until the approval is granted."
    ),
    parameters={
        "court": ("The court's e-filing identifier, e.g. 'sdny'.", MAX_NAME),
        "document": ("The document's file name as the court will list it.", 1024),
        "text": ("The full text to file.", MAX_TEXT),
    },
    nothing_yet="Nothing has been filed",
)

DMS_DELETE: Final = ConnectorTool(
    name="smf_dms_delete",
    connector="dms",
    description=(
        "Delete a document from the firm's document management system through its "
        "connector. The SMF Assurance gate decides; documents under legal hold are "
        "never deleted."
    ),
    parameters={"document_id": ("The document id in the DMS, e.g. 'doc-1207'.", 64)},
    nothing_yet="Nothing has been deleted",
)

CONNECTOR_TOOLS: Final = (COURT_FILING, DMS_DELETE)
_BUILDERS: Final = {COURT_FILING.name: _court_filing, DMS_DELETE.name: _dms_delete}


def connector_call(tool: ConnectorTool, args: object, context: HermesContext) -> ConnectorCall:
    """Check the arguments and build what the proposal carries; raises MappingError."""
    return _BUILDERS[tool.name](tool.checked(args), context)


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="seconds")


def _text(result: dict[str, Any]) -> str:
    return json.dumps(result, ensure_ascii=False)


def blocked(tool: ConnectorTool | str, reasons: tuple[str, ...]) -> str:
    """The adapter refused before asking the gate (refusing mode, bad arguments, errors)."""
    name = tool if isinstance(tool, str) else tool.name
    why = ", ".join(reasons) or "no reason given"
    return _text(
        {
            "status": "blocked",
            "tool": name,
            "reason_codes": list(reasons),
            "message": f"SMF Assurance adapter blocked {name}: {why}. Nothing was done.",
        }
    )


def no_verdict(tool: ConnectorTool, reasons: tuple[str, ...]) -> str:
    """No verdict arrived, but the proposal may have reached the gate: say it is unknown."""
    why = ", ".join(reasons) or "no reason given"
    return _text(
        {
            "status": "unknown",
            "tool": tool.name,
            "reason_codes": list(reasons),
            "message": (
                f"SMF Assurance: no verdict for {tool.name} arrived ({why}). The request may "
                "have reached the gate: it may be held for approval, or handed to its "
                "connector if no approval was needed. Do not assume it was done or not "
                "done; calling the tool again creates a new request."
            ),
        }
    )


def verdict_text(tool: ConnectorTool, verdict: Verdict) -> str:
    """What the model is told: held (approval id, expiry), denied (reasons), or the order id.

    Never says the action happened: a held action has not happened, and an
    allowed one was handed to a connector whose outcome this tool does not see.
    """
    reasons = list(verdict.reason_codes)
    why = ", ".join(reasons) or "no reason given"
    if verdict.outcome == "held" and verdict.approval_id is not None:
        roles = " or ".join(verdict.required_roles) or "an entitled approver"
        expires = _iso(verdict.expires_at_ms)
        return _text(
            {
                "status": "held",
                "tool": tool.name,
                "approval_id": verdict.approval_id,
                "expires_at": expires,
                "required_roles": list(verdict.required_roles),
                "reason_codes": reasons,
                "message": (
                    f"SMF Assurance: {tool.name} is HELD for approval by {roles} "
                    f"(approval id {verdict.approval_id}, expires {expires or 'unknown'}; "
                    f"reasons: {why}). {tool.nothing_yet} yet. Only if the approval is "
                    "granted before it expires does the gate hand exactly this action, once, "
                    "to its connector. Calling the tool again creates a new request that "
                    "needs its own approval."
                ),
            }
        )
    if verdict.outcome == "deny":
        return _text(
            {
                "status": "denied",
                "tool": tool.name,
                "reason_codes": reasons,
                "decision_id": verdict.decision_id,
                "message": (
                    f"SMF Assurance gate denied {tool.name}: {why}. {tool.nothing_yet}."
                    + decision_hint(verdict.decision_id)
                ),
            }
        )
    if verdict.outcome == "allow" and verdict.order_id is not None:
        return _text(
            {
                "status": "allowed",
                "tool": tool.name,
                "order_id": verdict.order_id,
                "connector": verdict.connector_id,
                "reason_codes": reasons,
                "message": (
                    f"SMF Assurance gate allowed {tool.name}: order {verdict.order_id} was "
                    f"handed to connector {verdict.connector_id}. The connector reports the "
                    "outcome to the gate; this tool does not see it."
                ),
            }
        )
    # held without an approval id, allowed without an order, or an unknown outcome:
    # nothing will run from here, so say so rather than guess
    return blocked(tool, (f"unexpected_verdict_{verdict.outcome}"[:64],))
