"""A Hermes tool call -> what the adapter proposes to the gate.

Pure functions and one small thread-safe object; no I/O except reading the
context file once. The gate's mapper table (``smf_assurance/pipeline/mappers/
smf-hermes-adapter.json``) decides what a tool *is*; this module supplies
what Hermes cannot know by itself, from the operator's per-matter context
file (``SMF_CONTEXT_FILE``), and fails closed where nobody said:

- actor, tenant, matter: only from the context file; without it every call
  is blocked (``smf_context_missing``).
- classification, redaction, citation verification: the context file's
  ``facts``; omitted means ``unknown``, which the policies treat as the worst.
- legal hold: ``legal_hold_paths`` lists the held path prefixes; a path tool
  whose target lies under one carries ``legal_hold: true``; when the list is
  absent the fact is unknown, and tools that need it are refused
  (``missing_required_fact``).
- injection taint: the context's starting value, raised (never lowered) to
  ``suspected`` for a whole session family (parent and subagents) once a tool
  whose output is untrusted (``untrusted_tools`` patterns) has run in it.
- legal hold of a DMS document (the adapter's ``smf_dms_delete`` tool):
  ``legal_hold_documents`` lists the held document ids; absent, unknown.
- destination locality: ``internal_targets`` for ``send_message``; anything
  else stays ``unknown``.

Arguments are proposed as Hermes will execute them: Hermes coerces string
arguments to their schema types after the ``pre_tool_call`` hook
(``model_tools.handle_function_call`` -> ``coerce_tool_args``, read in 0.19.0),
so the adapter applies the same coercion to a copy before hashing.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from smf_assurance.subjects.envelope import InjectionTaint, Surface
from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination

CONTEXT_SCHEMA: Final = "smf.hermes-context/1"
DEFAULT_UNTRUSTED: Final = (
    "read_file",
    "search_files",
    "web_*",
    "x_search",
    "browser_*",
    "session_search",
    "mcp_*",
    "vision_analyze",
    "video_analyze",
    "*_read",
)
"""Tools whose output may carry someone else's instructions into the session."""
PATH_TOOLS: Final = frozenset({"write_file", "patch", "read_file", "search_files"})
_V4A_HEADER: Final = re.compile(r"^\*\*\*\s*(?:Update|Add|Delete)\s+File:\s*(.+)$", re.MULTILINE)
_V4A_MOVE: Final = re.compile(r"^\*\*\*\s*Move\s+File:\s*(.+?)\s*->\s*(.+)$", re.MULTILINE)
"""Hermes 0.19.0's own header patterns (``tools/file_tools.py`` ``patch_tool``, the
sensitive-path check; ``tools/patch_parser.py`` uses the same leniency)."""
_TAINT_RANK: Final = {"clear": 0, "suspected": 1, "unknown": 2, "tainted": 3}
MAX_SESSIONS: Final = 10_000

Coercer = Callable[[str, dict[str, Any]], dict[str, Any]]
PatchParser = Callable[[str], list[str]]
"""The paths the runtime's own V4A parser finds in a patch text."""


class MappingError(Exception):
    """The call cannot be proposed; ``reason_code`` says why (the call is blocked)."""

    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(f"{reason_code}: {detail}" if detail else reason_code)
        self.reason_code = reason_code


class ReplyContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where a completed reply goes: one default and optional per-platform overrides."""

    destination: ProposedDestination = ProposedDestination()
    platforms: dict[str, ProposedDestination] = {}


class HermesContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The operator's per-matter context file (``SMF_CONTEXT_FILE``)."""

    schema: Literal["smf.hermes-context/1"]
    actor: ActorContext
    facts: DataFacts = DataFacts()
    legal_hold_paths: tuple[str, ...] | None = None
    legal_hold_documents: tuple[str, ...] | None = None
    """DMS document ids under legal hold (``smf_dms_delete``); absent: unknown."""
    internal_targets: tuple[str, ...] = ()
    reply: ReplyContext = ReplyContext()
    untrusted_tools: tuple[str, ...] = DEFAULT_UNTRUSTED


def load_context(path: Path) -> HermesContext:
    try:
        return msgspec.json.decode(path.read_bytes(), type=HermesContext)
    except OSError as exc:
        raise MappingError("smf_context_unreadable", exc.strerror or "") from exc
    except msgspec.DecodeError as exc:
        raise MappingError("smf_context_invalid", str(exc)) from exc


@dataclass(frozen=True, slots=True)
class ProposedCall:
    """Everything of a Proposal that depends on the call (the client adds the rest)."""

    native_tool: str
    arguments: dict[str, Any]
    destination: ProposedDestination
    facts: DataFacts
    surface: Surface


class SessionTaint:
    """Monotone per session family: once untrusted output entered, it stays.

    Subagents run in the same process with their own session ids
    (RUNTIMES.md: "subagents (same process, same hooks)"); ``subagent_start``
    links a child to its parent so both share one family. Past
    ``MAX_SESSIONS`` families the whole process counts as tainted (fail
    closed rather than grow without bound).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._root: dict[str, str] = {}
        self._tainted: set[str] = set()
        self._children: set[str] = set()
        self._everything = False

    def _family(self, session_id: str) -> str:
        return self._root.get(session_id, session_id)

    def link(self, parent: str, child: str) -> None:
        with self._lock:
            if len(self._root) >= MAX_SESSIONS:
                self._everything = True
                self._root.clear()
                self._children.clear()
            root = self._family(parent)
            self._root[child] = root
            self._children.add(child)
            if self._family(child) in self._tainted:
                self._tainted.add(root)

    def mark(self, session_id: str) -> None:
        with self._lock:
            if len(self._tainted) >= MAX_SESSIONS:
                self._everything = True
                self._tainted.clear()
            self._tainted.add(self._family(session_id))

    def poison(self) -> None:
        """Taint every session (when the adapter cannot tell which one read what)."""
        with self._lock:
            self._everything = True

    def is_tainted(self, session_id: str) -> bool:
        with self._lock:
            return self._everything or self._family(session_id) in self._tainted

    def is_child(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._children


def is_untrusted(tool_name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(tool_name, p) for p in patterns)


def _raised(base: InjectionTaint, tainted: bool) -> InjectionTaint:
    if tainted and _TAINT_RANK[base] < _TAINT_RANK["suspected"]:
        return "suspected"
    return base


def _resolve(path: str, cwd: str) -> str:
    return os.path.realpath(os.path.join(cwd, os.path.expanduser(path)))


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip(os.sep) + os.sep)


def target_paths(
    tool: str, args: Mapping[str, Any], parse_patch: PatchParser | None = None
) -> list[str]:
    """The file paths a path tool touches (``patch`` may name them inside its text).

    A patch under legal hold must never be proposed as clear because our reading of
    its text differs from Hermes's: Hermes's parser accepts ``***Update File:``,
    ``*** Move File: a -> b`` and ``*** Delete  File:``, which a regex of our own
    would miss. So for a patch text the targets are the union of
    what Hermes's own parser finds (``parse_patch``, the function its ``patch`` tool
    runs) and what Hermes's own header patterns match anywhere in the text (they
    also see headers after an early ``End Patch``, which the parser skips): a
    superset of what the tool can write. Without the runtime's parser the call is
    refused (``patch_parser_unavailable``): our reading alone could differ."""
    paths: list[str] = []
    if isinstance(args.get("path"), str):
        paths.append(args["path"])
    text = args.get("patch")
    if tool == "patch" and isinstance(text, str):
        if parse_patch is None:
            raise MappingError("patch_parser_unavailable")
        try:
            parsed = parse_patch(text)
        except Exception as exc:
            raise MappingError("patch_parser_unavailable", type(exc).__name__) from exc
        paths.extend(parsed)
        paths.extend(m.strip() for m in _V4A_HEADER.findall(text))
        for source, destination in _V4A_MOVE.findall(text):
            paths.extend((source.strip(), destination.strip()))
    return paths


def legal_hold_of(
    tool: str,
    args: Mapping[str, Any],
    held: tuple[str, ...] | None,
    cwd: str,
    parse_patch: PatchParser | None = None,
) -> bool | None:
    """True under a held prefix, False when every target is clear, None when unknown."""
    if tool not in PATH_TOOLS or held is None:
        return None
    paths = target_paths(tool, args, parse_patch)
    if not paths:
        return None
    prefixes = [_resolve(p, cwd) for p in held]
    resolved = [_resolve(p, cwd) for p in paths]
    return any(_under(p, h) for p in resolved for h in prefixes)


@dataclass(frozen=True, slots=True)
class Protected:
    """The adapter's own files, which no tool call may read or write.

    Finding: ``read_file`` of the adapter's key file was allowed as an internal
    read and its seed went to the model provider; whoever holds it signs as the
    runtime. ``paths`` are the files as configured and resolved; ``names`` the
    secret files' own names, looked for in any argument of any tool (a terminal
    ``cat``, code for ``execute_code``). A name spelled some other way in a shell
    command is not found; the floor denies terminals anyway, and docs/HERMES.md
    says how to keep the files out of the runtime's tools' reach by the OS."""

    paths: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def of(cls, secrets: tuple[str, ...], others: tuple[str, ...]) -> Protected:
        configured = tuple(p for p in (*secrets, *others) if p)
        paths = {os.path.abspath(os.path.expanduser(p)) for p in configured}
        paths |= {os.path.realpath(p) for p in paths}
        names = {os.path.basename(p) for p in secrets if p}
        return cls(paths=tuple(sorted(paths)), names=tuple(sorted(n for n in names if n)))


NOTHING_PROTECTED: Final = Protected()


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


def check_protected(
    tool: str,
    arguments: Mapping[str, Any],
    protected: Protected,
    cwd: str,
    parse_patch: PatchParser | None = None,
) -> None:
    """Raise ``credential_access`` when a call names one of the adapter's own files:
    a path tool's target is one (or, for ``search_files``, a folder holding one),
    or any string argument holds its path or a secret's name."""
    if not protected.paths:
        return
    if tool in PATH_TOOLS:
        targets = target_paths(tool, arguments, parse_patch)
        if tool == "search_files" and not targets:
            targets = ["."]  # Hermes searches its working folder when no path is given
        for target in targets:
            resolved = _resolve(target, cwd)
            for path in protected.paths:
                if _under(resolved, path) or (tool == "search_files" and _under(path, resolved)):
                    raise MappingError("credential_access")
    needles = (*protected.paths, *protected.names)
    for text in _strings(arguments):
        if any(needle in text for needle in needles):
            raise MappingError("credential_access")


def final_arguments(tool: str, args: object, coerce: Coercer | None) -> dict[str, Any]:
    """A JSON copy of the arguments, coerced as Hermes will before executing."""
    if not isinstance(args, dict):
        raise MappingError("arguments_not_an_object")
    try:
        copied: dict[str, Any] = json.loads(json.dumps(args, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise MappingError("arguments_not_json", type(exc).__name__) from exc
    if coerce is not None:
        coerced = coerce(tool, copy.deepcopy(copied))
        if isinstance(coerced, dict):
            copied = coerced
    return copied


def reply_destination(context: HermesContext, platform: str) -> ProposedDestination:
    return context.reply.platforms.get(platform, context.reply.destination)


def session_facts(
    context: HermesContext, tainted: bool, legal_hold: bool | None = None
) -> DataFacts:
    base = context.facts
    return DataFacts(
        classification=base.classification,
        injection_taint=_raised(base.injection_taint, tainted),
        redaction_status=base.redaction_status,
        redaction_evidence=base.redaction_evidence,
        legal_hold=legal_hold,
        citation_verification=base.citation_verification,
    )


def propose_call(
    tool_name: object,
    args: object,
    *,
    session_id: str,
    context: HermesContext,
    taint: SessionTaint,
    coerce: Coercer | None = None,
    parse_patch: PatchParser | None = None,
    protected: Protected = NOTHING_PROTECTED,
    cwd: str | None = None,
    platform: str = "",
) -> ProposedCall:
    """Map one ``pre_tool_call`` into what the adapter proposes; raises MappingError."""
    if not isinstance(tool_name, str) or not 1 <= len(tool_name) <= 256:
        raise MappingError("tool_name_invalid")
    arguments = final_arguments(tool_name, args, coerce)
    where = cwd or os.environ.get("TERMINAL_CWD") or os.getcwd()
    check_protected(tool_name, arguments, protected, where, parse_patch)
    facts = session_facts(
        context,
        taint.is_tainted(session_id),
        legal_hold_of(tool_name, arguments, context.legal_hold_paths, where, parse_patch),
    )
    destination = ProposedDestination()
    if tool_name == "send_message":
        target = arguments.get("target")
        address = target if isinstance(target, str) else ""
        destination = ProposedDestination(
            address=address[:2048],
            locality="internal" if address in context.internal_targets else "unknown",
        )
    elif tool_name == "clarify":
        destination = reply_destination(context, platform)
    surface: Surface = "tool_call"
    if tool_name.startswith("mcp_"):
        surface = "mcp"
    elif taint.is_child(session_id):
        surface = "delegation"
    return ProposedCall(
        native_tool=tool_name,
        arguments=arguments,
        destination=destination,
        facts=facts,
        surface=surface,
    )
