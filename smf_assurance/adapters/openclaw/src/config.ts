/**
 * The plugin's configuration (`plugins.entries.smf-assurance.config`, schema in
 * `openclaw.plugin.json`) and the per-matter context it names.
 *
 * Nothing here throws past {@link readConfig}: a missing or bad setting becomes
 * a problem with a reason code, and the plugin then registers its hooks in
 * refusing mode (every call blocked), because OpenClaw runs tools unguarded
 * when a plugin fails to register (the Hermes adapter made the same choice,
 * `smf_assurance/adapters/hermes/plugin.py`, for the same reason).
 *
 * `trustRootFile` names the operator's release trust root
 * (`smf.release-trust-root/1`, the gate state directory's
 * `release-trust-root.json`). The plugin verifies the governed release with it
 * (`release.ts`) and trusts, for approval outcomes, only the `gate` keys of
 * the VERIFIED release's registry (`attest.ts`); without a valid trust root the
 * plugin refuses to run, because it could not tell the gate's allow from a
 * forged one. There is no `registryFile`: a registry read from disk is not a
 * verified release.
 *
 * Confined (`smf-assurance runtime run`, docs/CONFINEMENT.md): the environment names
 * the launcher's signer (`SMF_SIGNER_SOCKET`, `src/signer.ts`) and, unless the config
 * does, the context file and the trust root it copied into the sandbox
 * (`SMF_CONTEXT_FILE`, `SMF_RELEASE_TRUST_ROOT`). Then no `keyFile` or
 * `credentialFile` may be set (`smf_key_source_ambiguous`): the launcher signs and
 * its NATS forwarder answers the server's nonce, so the plugin connects with its
 * principal's inbox prefix only.
 *
 * The context supplies what OpenClaw cannot know (actor, tenant, matter, data
 * facts); where nobody said, facts stay `unknown` and the gate treats them as
 * the worst case (ARCHITECTURE.md: missing facts end in a denial).
 */

import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import {
  CITATIONS,
  CLASSIFICATIONS,
  REDACTIONS,
  TAINTS,
  type ActorContext,
  type CitationVerification,
  type Classification,
  type InjectionTaint,
  type RedactionStatus,
} from "./contract/messages.js";
import { KeyFileError, loadPrivateKey, type Signer } from "./contract/keys.js";
import { RemoteSigner, SIGNER_SOCKET_ENV, SignerError } from "./signer.js";
import { protectedOf, type Protected } from "./mapping.js";
import { TrustRootError, type TrustRoot } from "./contract/release.js";
import { CREDENTIAL_INVALID, CredentialFileError, readCredential, readSeed, type BusCredential } from "./contract/bus_access.js";
import { nkeys } from "@nats-io/transport-node";
import { loadTrustRoot } from "./release.js";

export const CONTEXT_SCHEMA = "smf.openclaw-context/1";
export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";
export const DEFAULT_GATE_TIMEOUT_MS = 5000;
export const DEFAULT_HOLD_TIMEOUT_MS = 300_000;
export const MAX_HOLD_TIMEOUT_MS = 600_000;
export const DEFAULT_ATTEST_INTERVAL_MS = 60_000;
/** Tools whose output may carry someone else's instructions into the process. */
export const DEFAULT_UNTRUSTED_TOOLS = ["read", "web_search", "web_fetch", "x_search", "browser", "view_image", "pdf"];
const MAX_CONTEXT_BYTES = 256 * 1024;

export interface ContextFacts {
  classification: Classification;
  injection_taint: InjectionTaint;
  redaction_status: RedactionStatus;
  redaction_evidence: string | null;
  citation_verification: CitationVerification;
}

export interface OpenClawContext {
  actor: ActorContext;
  facts: ContextFacts;
  /** Held path prefixes; `null`: nobody said, legal hold is unknown for path tools. */
  legalHoldPaths: string[] | null;
  /** Where relative paths of file tools resolve; `null`: relative paths stay unknown. */
  workspaceDir: string | null;
  /** Message targets that count as internal; everything else is `unknown`. */
  internalTargets: string[];
  untrustedTools: string[];
}

export interface PluginConfig {
  natsUrl: string;
  runtimeId: string;
  key: Signer;
  /** Who the plugin is on the bus: the key file's principal and its nkey seed file, or
   * (confined) the signer's principal and no seed file (`seedFile: null`). */
  credential: BusIdentity;
  /** The release trust root: the gate keys come from a release it verifies, never from a file. */
  trustRoot: TrustRoot;
  attestIntervalMs: number;
  context: OpenClawContext;
  gateTimeoutMs: number;
  holdTimeoutMs: number;
  /** The plugin's files and OpenClaw's config file, out of every tool's reach. */
  protected: Protected;
  /** The CA the bus's certificate is checked against (`caFile`, else `SMF_NATS_CA`
   * unless confined): set, the connection is TLS from its first byte; `null`, plain,
   * as only a loopback bus (or the confined launcher's forwarder) accepts. */
  busCa: string | null;
}

/** A principal on the bus and its seed file; `null` when the launcher's forwarder signs. */
export interface BusIdentity {
  readonly principal: string;
  readonly seedFile: string | null;
}

export interface ConfigProblem {
  reasonCode: string;
  detail: string;
}

export type ConfigResult = { config: PluginConfig; problems: [] } | { config: undefined; problems: ConfigProblem[] };

class ContextError extends Error {}

function record(value: unknown, what: string, fields: readonly string[], required: readonly string[]): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new ContextError(`${what} is not an object`);
  const r = value as Record<string, unknown>;
  for (const key of Object.keys(r)) if (!fields.includes(key)) throw new ContextError(`${what} has unknown field ${key}`);
  for (const key of required) if (!(key in r)) throw new ContextError(`${what} lacks ${key}`);
  return r;
}

function name(value: unknown, what: string): string {
  if (typeof value !== "string" || value.length < 1 || value.length > 256) throw new ContextError(`${what} must be 1 to 256 characters`);
  return value;
}

function names(value: unknown, what: string): string[] {
  if (!Array.isArray(value)) throw new ContextError(`${what} is not a list`);
  return value.map((item, i) => name(item, `${what}[${i}]`));
}

function oneOf<T extends string>(value: unknown, allowed: readonly T[], what: string, fallback: T): T {
  if (value === undefined) return fallback;
  if (typeof value !== "string" || !(allowed as readonly string[]).includes(value)) {
    throw new ContextError(`${what} must be one of ${allowed.join(", ")}`);
  }
  return value as T;
}

const ACTOR_FIELDS = ["domain", "tenant_id", "organization_id", "matter_id", "actor_id", "actor_roles", "governing_laws"];
const FACT_FIELDS = ["classification", "injection_taint", "redaction_status", "redaction_evidence", "citation_verification"];

/** Validate a `smf.openclaw-context/1` document (unknown fields refused, as msgspec does). */
export function parseContext(value: unknown): OpenClawContext {
  const doc = record(
    value,
    "context",
    ["schema", "actor", "facts", "legal_hold_paths", "workspace_dir", "internal_targets", "untrusted_tools"],
    ["schema", "actor"],
  );
  if (doc.schema !== CONTEXT_SCHEMA) throw new ContextError(`context.schema must be ${CONTEXT_SCHEMA}`);
  const a = record(doc.actor, "context.actor", ACTOR_FIELDS, ACTOR_FIELDS);
  const actor: ActorContext = {
    domain: name(a.domain, "actor.domain"),
    tenant_id: name(a.tenant_id, "actor.tenant_id"),
    organization_id: name(a.organization_id, "actor.organization_id"),
    matter_id: name(a.matter_id, "actor.matter_id"),
    actor_id: name(a.actor_id, "actor.actor_id"),
    actor_roles: names(a.actor_roles, "actor.actor_roles"),
    governing_laws: names(a.governing_laws, "actor.governing_laws"),
  };
  const f = record(doc.facts ?? {}, "context.facts", FACT_FIELDS, []);
  const evidence = f.redaction_evidence;
  if (evidence !== undefined && evidence !== null && (typeof evidence !== "string" || evidence.length > 1024)) {
    throw new ContextError("facts.redaction_evidence must be text of at most 1024 characters");
  }
  const facts: ContextFacts = {
    classification: oneOf(f.classification, CLASSIFICATIONS, "facts.classification", "unknown"),
    injection_taint: oneOf(f.injection_taint, TAINTS, "facts.injection_taint", "unknown"),
    redaction_status: oneOf(f.redaction_status, REDACTIONS, "facts.redaction_status", "unknown"),
    redaction_evidence: typeof evidence === "string" ? evidence : null,
    citation_verification: oneOf(f.citation_verification, CITATIONS, "facts.citation_verification", "unknown"),
  };
  const strings = (v: unknown, what: string, fallback: string[]): string[] => {
    if (v === undefined) return fallback;
    if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) throw new ContextError(`${what} must be a list of text`);
    return v as string[];
  };
  const held = doc.legal_hold_paths;
  const workspace = doc.workspace_dir;
  if (workspace !== undefined && (typeof workspace !== "string" || !isAbsolute(workspace))) {
    throw new ContextError("workspace_dir must be an absolute path");
  }
  return {
    actor,
    facts,
    legalHoldPaths: held === undefined || held === null ? null : strings(held, "legal_hold_paths", []),
    workspaceDir: typeof workspace === "string" ? workspace : null,
    internalTargets: strings(doc.internal_targets, "internal_targets", []),
    untrustedTools: strings(doc.untrusted_tools, "untrusted_tools", DEFAULT_UNTRUSTED_TOOLS),
  };
}

function integer(value: unknown, fallback: number, low: number, high: number, what: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < low || value > high) {
    throw new ContextError(`${what} must be an integer from ${low} to ${high}`);
  }
  return value;
}

/** The contract's file checks, then the seed's own checksum (the NATS client's nkeys). */
function busCredential(principal: string, seedFile: string, add: (code: string, detail: string) => void): BusCredential | undefined {
  try {
    const credential = readCredential(principal, seedFile);
    const seed = readSeed(seedFile);
    try {
      nkeys.fromSeed(seed).clear();
    } catch {
      add(CREDENTIAL_INVALID, `${seedFile} does not hold a valid nkey seed`);
      return undefined;
    } finally {
      seed.fill(0);
    }
    return credential;
  } catch (error) {
    if (error instanceof CredentialFileError) add(error.reasonCode, error.detail);
    else add("smf_bus_credential_unreadable", error instanceof Error ? error.name : "error");
    return undefined;
  }
}

const CONFIG_FIELDS = ["natsUrl", "runtimeId", "keyFile", "credentialFile", "trustRootFile", "contextFile", "context", "gateTimeoutMs", "holdTimeoutMs", "attestIntervalMs", "caFile"];

/** The environment variable the gate's other clients read their bus CA from
 * (`smf_assurance.subjects.bus_access.TLS_CA_ENV`). */
export const TLS_CA_ENV = "SMF_NATS_CA";
export const CA_UNUSABLE = "smf_bus_ca_unusable";
const MAX_CA_BYTES = 64 * 1024;

/**
 * The bus CA file, checked: a readable file holding at least one PEM certificate
 * (`smf_bus_ca_unusable` otherwise, naming the file). From `caFile`; without it,
 * from `SMF_NATS_CA` unless confined: inside the sandbox the runtime's leg is the
 * launcher's forwarder, plain, and the forwarder speaks TLS to the bus.
 */
function busCa(cfg: Record<string, unknown>, env: NodeJS.ProcessEnv, confined: boolean, add: (code: string, detail: string) => void): string | null {
  const given = cfg.caFile ?? (confined ? undefined : env[TLS_CA_ENV] || undefined);
  if (given === undefined) return null;
  if (typeof given !== "string" || given.length === 0) {
    add(CA_UNUSABLE, "caFile must be a path");
    return null;
  }
  try {
    const data = readFileSync(given);
    if (data.length > MAX_CA_BYTES || !data.toString("latin1").includes("-----BEGIN CERTIFICATE-----")) {
      add(CA_UNUSABLE, `${given} holds no PEM certificate`);
    }
  } catch (error) {
    add(CA_UNUSABLE, `cannot read ${given}: ${error instanceof Error && "code" in error ? String(error.code) : "error"}`);
  }
  return given;
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

/**
 * The key and the bus seed (secrets: their names are looked for too), the trust
 * root and context file (whoever rewrites them changes what the plugin trusts
 * and who it says acts), and OpenClaw's own config file, which holds the
 * model-gateway token (`OPENCLAW_CONFIG_PATH`, else `openclaw.json` in the state
 * folder).
 */
export function protectedFiles(cfg: Record<string, unknown>, env: NodeJS.ProcessEnv): Protected {
  const stateDir = env.OPENCLAW_STATE_DIR ?? join(env.HOME ?? homedir(), ".openclaw");
  const openclawConfig = env.OPENCLAW_CONFIG_PATH ?? join(stateDir, "openclaw.json");
  return protectedOf([text(cfg.keyFile), text(cfg.credentialFile)], [text(cfg.trustRootFile), text(cfg.contextFile), openclawConfig]);
}

/** Read the plugin config; never throws (problems carry reason codes). */
export function readConfig(raw: unknown, env: NodeJS.ProcessEnv = process.env): ConfigResult {
  const problems: ConfigProblem[] = [];
  const add = (reasonCode: string, detail: string): void => {
    problems.push({ reasonCode, detail });
  };
  const cfg = { ...(typeof raw === "object" && raw !== null && !Array.isArray(raw) ? raw : {}) } as Record<string, unknown>;
  for (const key of Object.keys(cfg)) if (!CONFIG_FIELDS.includes(key)) add("smf_config_invalid", `unknown config key ${key}`);

  const natsUrl = cfg.natsUrl ?? DEFAULT_NATS_URL;
  if (typeof natsUrl !== "string" || !/^(nats|tls):\/\/\S+$/.test(natsUrl)) add("smf_config_invalid", "natsUrl must be a nats:// URL");

  const runtimeId = cfg.runtimeId;
  if (runtimeId === undefined) add("smf_runtime_id_missing", "set runtimeId");
  else if (typeof runtimeId !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(runtimeId)) {
    add("smf_config_invalid", "runtimeId must be one subject token");
  }

  let key: Signer | undefined;
  let principal: string | undefined;
  let credential: BusIdentity | undefined;
  const signerSocket = env[SIGNER_SOCKET_ENV];
  if (signerSocket !== undefined && signerSocket.length > 0) {
    if (cfg.keyFile !== undefined || cfg.credentialFile !== undefined) {
      add("smf_key_source_ambiguous", `set either ${SIGNER_SOCKET_ENV} or keyFile and credentialFile`);
    } else {
      try {
        const remote = RemoteSigner.connect(signerSocket);
        key = remote;
        credential = { principal: remote.principal, seedFile: null };
      } catch (error) {
        add("smf_signer_unavailable", error instanceof SignerError ? error.reasonCode : String(error));
      }
    }
    cfg.trustRootFile ??= env.SMF_RELEASE_TRUST_ROOT;
    if (cfg.context === undefined) cfg.contextFile ??= env.SMF_CONTEXT_FILE;
  } else {
    if (typeof cfg.keyFile !== "string" || cfg.keyFile.length === 0) add("smf_runtime_key_missing", "set keyFile to the runtime's key file");
    else {
      try {
        ({ key, principal } = loadPrivateKey(cfg.keyFile));
      } catch (error) {
        add("smf_runtime_key_unreadable", error instanceof KeyFileError ? error.message : String(error));
      }
    }
    if (typeof cfg.credentialFile !== "string" || cfg.credentialFile.length === 0) {
      add("smf_bus_credential_missing", "set credentialFile to the runtime's .nkey file");
    } else if (principal !== undefined) {
      credential = busCredential(principal, cfg.credentialFile, add);
    }
  }

  const ca = busCa(cfg, env, signerSocket !== undefined && signerSocket.length > 0, add);

  let trustRoot: TrustRoot | undefined;
  try {
    trustRoot = loadTrustRoot(cfg.trustRootFile);
  } catch (error) {
    if (error instanceof TrustRootError) add(error.reasonCode, error.message);
    else add("smf_release_trust_root_unreadable", String(error));
  }

  let context: OpenClawContext | undefined;
  const hasFile = cfg.contextFile !== undefined;
  const hasInline = cfg.context !== undefined;
  if (hasFile === hasInline) add("smf_context_missing", "set exactly one of contextFile and context");
  else {
    try {
      let doc: unknown = cfg.context;
      if (hasFile) {
        if (typeof cfg.contextFile !== "string") throw new ContextError("contextFile must be a path");
        const data = readFileSync(cfg.contextFile);
        if (data.length > MAX_CONTEXT_BYTES) throw new ContextError("context file is too large");
        doc = JSON.parse(data.toString("utf8"));
      }
      context = parseContext(doc);
    } catch (error) {
      const code = error instanceof ContextError || error instanceof SyntaxError ? "smf_context_invalid" : "smf_context_unreadable";
      add(code, error instanceof Error ? error.message : String(error));
    }
  }

  let gateTimeoutMs = DEFAULT_GATE_TIMEOUT_MS;
  let holdTimeoutMs = DEFAULT_HOLD_TIMEOUT_MS;
  let attestIntervalMs = DEFAULT_ATTEST_INTERVAL_MS;
  try {
    attestIntervalMs = integer(cfg.attestIntervalMs, DEFAULT_ATTEST_INTERVAL_MS, 1000, 600_000, "attestIntervalMs");
    gateTimeoutMs = integer(cfg.gateTimeoutMs, DEFAULT_GATE_TIMEOUT_MS, 200, 30_000, "gateTimeoutMs");
    holdTimeoutMs = integer(cfg.holdTimeoutMs, DEFAULT_HOLD_TIMEOUT_MS, 0, MAX_HOLD_TIMEOUT_MS, "holdTimeoutMs");
  } catch (error) {
    add("smf_config_invalid", (error as Error).message);
  }

  if (
    problems.length > 0 ||
    key === undefined ||
    credential === undefined ||
    trustRoot === undefined ||
    context === undefined ||
    typeof runtimeId !== "string" ||
    typeof natsUrl !== "string"
  ) {
    return { config: undefined, problems: problems.length > 0 ? problems : [{ reasonCode: "smf_config_invalid", detail: "" }] };
  }
  const guard = protectedFiles(cfg, env);
  return {
    config: { natsUrl, runtimeId, key, credential, trustRoot, context, gateTimeoutMs, holdTimeoutMs, attestIntervalMs, protected: guard, busCa: ca },
    problems: [],
  };
}
