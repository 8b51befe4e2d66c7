/**
 * An OpenClaw tool call -> what the adapter proposes to the gate.
 *
 * Pure functions and one small object; no I/O except resolving paths. The
 * gate's mapper table (`smf_assurance/pipeline/mappers/smf-openclaw-adapter.json`) decides
 * what a tool IS; this module supplies what OpenClaw cannot know from the
 * operator's context (`config.ts`) and fails closed where nobody said, as the
 * Hermes mapping does (`smf_assurance/adapters/hermes/mapping.py`):
 *
 * - arguments: the canonical copy of `event.params` (NFC strings, sorted keys,
 *   integers only). It is what is signed, what the gate hashes, and what the
 *   hook returns as `{params}` on an allow, so OpenClaw executes exactly the
 *   bytes that were decided on. Params without a canonical form (a float, a
 *   lone surrogate, a character newer than the gate's Unicode) are blocked.
 * - legal hold: a file tool (`read`, `write`, `edit`, `apply_patch`) whose
 *   target lies under a `legal_hold_paths` prefix carries `legal_hold: true`;
 *   every target resolved and clear gives `false`; no list, or a relative path
 *   with no `workspace_dir`, leaves it unknown, and the gate refuses tools that
 *   need it (`missing_required_fact`).
 * - injection taint: the context's value, raised (never lowered) to
 *   `suspected` for the WHOLE process once a tool whose output is untrusted
 *   has run. OpenClaw does not tell the hook which session spawned a subagent,
 *   so a per-session taint could leave a child clean; the process is the only
 *   family the adapter can prove.
 * - message destination: `channel:target` (or the targets list) from the
 *   params; `internal` only when listed in `internal_targets`, else `unknown`.
 */

import { existsSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, isAbsolute, join, resolve, sep } from "node:path";
import { CanonicalJSONError, canonicalValue, type JsonObject } from "./contract/canonical.js";
import type { OpenClawContext } from "./config.js";
import type { DataFacts, InjectionTaint, ProposedDestination, Surface } from "./contract/messages.js";

export const PATH_TOOLS = new Set(["read", "write", "edit", "apply_patch"]);
/**
 * OpenClaw 2026.9.6's executor trims each header line before it matches
 * `*** Add File: ` and the rest (`parseOneHunk`), so a header with a leading
 * space would escape an anchored regex. The adapter reads every trimmed line
 * with a looser pattern than the executor's (spacing and case free), a superset.
 */
const PATCH_HEADER = /^\*\*\*\s*(?:(?:Add|Update|Delete)\s*File|Move\s*(?:to|File))\s*:\s*(.+)$/i;
const TAINT_RANK: Record<InjectionTaint, number> = { clear: 0, suspected: 1, unknown: 2, tainted: 3 };

export class MappingError extends Error {
  override name = "MappingError";
  constructor(readonly reasonCode: string, detail = "") {
    super(detail ? `${reasonCode}: ${detail}` : reasonCode);
  }
}

export interface ProposedCall {
  nativeTool: string;
  arguments: JsonObject;
  content: string;
  destination: ProposedDestination;
  facts: DataFacts;
  surface: Surface;
}

/** Monotone: once untrusted output entered the process, every later proposal says so. */
export class ProcessTaint {
  private tainted = false;
  mark(): void {
    this.tainted = true;
  }
  isTainted(): boolean {
    return this.tainted;
  }
}

/** `fnmatch`-style `*` and `?` patterns, as the Hermes adapter's `untrusted_tools`. */
export function matchesPattern(name: string, pattern: string): boolean {
  const re = new RegExp(
    "^" + pattern.replace(/[.+^${}()|[\]\\]/g, "\\$&").replaceAll("*", ".*").replaceAll("?", ".") + "$",
  );
  return re.test(name);
}

export function isUntrusted(toolName: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => matchesPattern(toolName, p));
}

/** The canonical copy of the params: an object, or the call is blocked. */
export function finalArguments(params: unknown): JsonObject {
  let value;
  try {
    value = canonicalValue(params);
  } catch (error) {
    if (error instanceof CanonicalJSONError) throw new MappingError("arguments_not_canonical", error.message);
    throw error;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new MappingError("arguments_not_an_object");
  // OpenClaw merges returned params SHALLOWLY over the original ones, so a
  // top-level key that NFC rewrites would survive next to its normalized twin,
  // and the tool would see a key the gate never hashed: refuse such calls.
  for (const key of Object.keys(params as object)) {
    if (key.normalize("NFC") !== key) throw new MappingError("arguments_keys_not_nfc", JSON.stringify(key));
  }
  return value;
}

/** Follow symlinks of the part that exists (as Python's os.path.realpath does). */
function realpathLoose(path: string): string {
  if (existsSync(path)) return realpathSync.native(path);
  const parent = dirname(path);
  if (parent === path) return path;
  return join(realpathLoose(parent), basename(path));
}

function resolvePath(path: string, workspace: string | null): string | null {
  const expanded = path === "~" ? homedir() : path.startsWith("~/") ? join(homedir(), path.slice(2)) : path;
  if (!isAbsolute(expanded) && workspace === null) return null;
  return realpathLoose(resolve(workspace ?? "/", expanded));
}

function under(path: string, prefix: string): boolean {
  const trimmed = prefix.length > 1 ? prefix.replace(/\/+$/, "") : prefix;
  return path === trimmed || path.startsWith(trimmed === sep ? sep : trimmed + sep);
}

/**
 * Both readings of a path OpenClaw may give it: its file tools strip one leading
 * `@` (a file reference) unless a file of that literal name exists
 * (`normalizeFileReferencePrefix`, `preserveAtPrefixedRelativePath`), which the
 * adapter cannot know before the call runs; so both count.
 */
function readings(raw: string): string[] {
  if (!raw.startsWith("@")) return [raw];
  const referenced = raw.slice(1);
  return [raw, referenced.startsWith("@") ? `./${referenced}` : referenced];
}

/** The file paths a file tool touches (`apply_patch` names them inside its text). */
export function targetPaths(tool: string, args: JsonObject): string[] {
  const raw: string[] = [];
  if (typeof args.path === "string") raw.push(args.path);
  if (tool === "apply_patch" && typeof args.input === "string") {
    for (const line of args.input.split(/\r?\n/)) {
      const m = PATCH_HEADER.exec(line.trim());
      if (m?.[1] !== undefined) raw.push(m[1].trim());
    }
  }
  return raw.flatMap(readings);
}

/** True under a held prefix, false when every target is resolved and clear, null when unknown. */
export function legalHoldOf(tool: string, args: JsonObject, context: OpenClawContext): boolean | null {
  if (!PATH_TOOLS.has(tool) || context.legalHoldPaths === null) return null;
  const paths = targetPaths(tool, args);
  if (paths.length === 0) return null;
  const resolved = paths.map((p) => resolvePath(p, context.workspaceDir));
  const prefixes = context.legalHoldPaths.map((p) => resolvePath(p, context.workspaceDir));
  if (prefixes.some((p) => p === null)) return null;
  if (resolved.some((p) => p !== null && prefixes.some((h) => h !== null && under(p, h)))) return true;
  if (resolved.some((p) => p === null)) return null;
  return false;
}

function raised(base: InjectionTaint, tainted: boolean): InjectionTaint {
  return tainted && TAINT_RANK[base] < TAINT_RANK.suspected ? "suspected" : base;
}

export function sessionFacts(context: OpenClawContext, tainted: boolean, legalHold: boolean | null): DataFacts {
  const f = context.facts;
  return {
    classification: f.classification,
    injection_taint: raised(f.injection_taint, tainted),
    redaction_status: f.redaction_status,
    redaction_evidence: f.redaction_evidence,
    legal_hold: legalHold,
    citation_verification: f.citation_verification,
  };
}

function messageDestination(args: JsonObject, context: OpenClawContext): ProposedDestination {
  const channel = typeof args.channel === "string" ? args.channel : "";
  const targets: string[] = [];
  if (typeof args.target === "string") targets.push(args.target);
  if (Array.isArray(args.targets)) for (const t of args.targets) if (typeof t === "string") targets.push(t);
  const addresses = targets.map((t) => (channel ? `${channel}:${t}` : t));
  const address = addresses.join(",");
  // Internal only when every addressee is listed as internal; no target at all
  // (the current conversation) is not something the adapter can vouch for.
  const internal = addresses.length > 0 && addresses.every((a) => context.internalTargets.includes(a));
  return { address: address.slice(0, 2048), locality: internal ? "internal" : "unknown" };
}

/**
 * The plugin's own files, which no tool call may read or write.
 * The attack: `read` of the adapter's key file, allowed as an internal read, would
 * send its seed to the model provider; whoever holds it signs as the runtime.
 * `paths` are the files as configured and resolved; `names` the secret files'
 * own names, looked for in every string argument of every tool (an `exec`
 * `cat`). A name spelled some other way in a shell command is not found; the
 * floor denies `exec` without approval, and docs/OPENCLAW.md says how to keep
 * the files out of the tools' reach by the OS.
 */
export interface Protected {
  paths: string[];
  names: string[];
}

export const NOTHING_PROTECTED: Protected = { paths: [], names: [] };

export function protectedOf(secrets: string[], others: string[]): Protected {
  const paths = new Set<string>();
  for (const p of [...secrets, ...others]) {
    if (p.length === 0) continue;
    const absolute = resolve(p === "~" || p.startsWith("~/") ? join(homedir(), p.slice(1)) : p);
    paths.add(absolute);
    paths.add(realpathLoose(absolute));
  }
  const names = new Set(secrets.filter((p) => p.length > 0).map((p) => basename(p)));
  return { paths: [...paths].sort(), names: [...names].filter((n) => n.length > 0).sort() };
}

function strings(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.flatMap(strings);
  if (typeof value === "object" && value !== null) return Object.values(value).flatMap(strings);
  return [];
}

/** Throw `credential_access` when a call names one of the plugin's own files. */
export function checkProtected(tool: string, args: JsonObject, guard: Protected, context: OpenClawContext): void {
  if (guard.paths.length === 0) return;
  if (PATH_TOOLS.has(tool)) {
    for (const target of targetPaths(tool, args)) {
      const resolved = resolvePath(target, context.workspaceDir);
      if (resolved !== null && guard.paths.some((p) => under(resolved, p))) throw new MappingError("credential_access");
    }
  }
  const needles = [...guard.paths, ...guard.names];
  for (const text of strings(args)) {
    if (needles.some((needle) => text.includes(needle))) throw new MappingError("credential_access");
  }
}

/** Map one `before_tool_call` into what the adapter proposes; raises MappingError. */
export function proposeCall(
  toolName: unknown,
  params: unknown,
  sessionKey: string | undefined,
  context: OpenClawContext,
  taint: ProcessTaint,
  guard: Protected = NOTHING_PROTECTED,
): ProposedCall {
  if (typeof toolName !== "string" || toolName.length < 1 || toolName.length > 256) throw new MappingError("tool_name_invalid");
  const args = finalArguments(params);
  checkProtected(toolName, args, guard, context);
  const facts = sessionFacts(context, taint.isTainted(), legalHoldOf(toolName, args, context));
  let destination: ProposedDestination = { address: "", locality: "unknown" };
  let content = "";
  if (toolName === "message") {
    destination = messageDestination(args, context);
    if (typeof args.message === "string") content = args.message;
  }
  const surface: Surface = sessionKey !== undefined && sessionKey.includes(":subagent:") ? "delegation" : "tool_call";
  return { nativeTool: toolName, arguments: args, content, destination, facts, surface };
}
