/**
 * The gate keys the plugin trusts, read from the key registry (`smf.registry/1`,
 * the twin of `smf_assurance/subjects/registry.py`'s `load_registry`, as far as the plugin
 * needs it) carried by a release the plugin VERIFIED itself (`../release.ts`);
 * never from a file on disk.
 *
 * ARCHITECTURE.md, "Trust and identity on the bus": a receiver verifies against
 * keys named in the registry, for the role that fits the message. Approval
 * outcomes are signed by the gate, so only entries with role `gate` count; a
 * runtime's, approver's or connector's key never does (`outcome.ts`).
 *
 * The registry is checked as Python checks it, and anything wrong refuses the
 * whole release (the plugin then runs in refusing mode, `../attest.ts`): unknown
 * fields, a schema other than `smf.registry/1`, a key whose `key_id` is not
 * the id derived from its public key (TUF, "File formats": one key, one id),
 * the same key twice, a runtime or a launcher without `runtime_id`, a connector without
 * `connector_id`, and a registry that names no gate key at all.
 *
 * `retired` lists keys a rotation retired (Python's `RegistryFile.retired`): they
 * stay for the evidence they signed before, so they are checked as entries are
 * and must hold no bus credential, but the plugin never trusts one.
 *
 * `passkeys` lists the people's enrolled passkeys (Python's `RegistryFile.passkeys`,
 * `smf_assurance/subjects/passkeys.py`): the gate verifies them, the plugin never
 * does; each is checked for its exact fields and must name a principal registered
 * with role `approver`, so a registry the gate refuses is refused here too.
 */

import { VerifyKey } from "./keys.js";

export const REGISTRY_SCHEMA = "smf.registry/1";
export const PUBLIC_KEY_KIND = "smf.ed25519.public/1";
export const MAX_REGISTRY_BYTES = 4 * 1024 * 1024;
const ROLES = ["runtime", "gate", "connector", "approver", "gateway", "launcher", "console", "publisher", "swarm", "operator"];
const ENTRY_FIELDS = ["key", "role", "runtime_id", "connector_id", "tenants", "licensed_roles", "nats_user"];
const NKEY_USER_RE = /^U[A-Z2-7]{55}$/;
const KEY_FIELDS = ["kind", "key_id", "principal", "public_key"];
const PASSKEY_FIELDS = ["principal", "credential_id", "public_key", "rp_id", "origins", "enrolled_at_ms", "label"];
const PASSKEY_REQUIRED = ["principal", "credential_id", "public_key", "rp_id", "origins", "enrolled_at_ms"];
const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The registry file cannot be read (`unreadable`), is not a valid registry (`invalid`), or names no gate key. */
export class RegistryError extends Error {
  override name = "RegistryError";
  constructor(readonly reasonCode: "smf_registry_unreadable" | "smf_registry_invalid" | "smf_gate_keys_missing", detail: string) {
    super(detail);
  }
}

function invalid(detail: string): never {
  throw new RegistryError("smf_registry_invalid", detail);
}

function exact(value: unknown, fields: readonly string[], required: readonly string[], what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) invalid(`${what} is not an object`);
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) if (!fields.includes(key)) invalid(`${what} has unknown field ${key}`);
  for (const key of required) if (!(key in record)) invalid(`${what} lacks ${key}`);
  return record;
}

export function publicKey(value: unknown, what: string): VerifyKey {
  const record = exact(value, KEY_FIELDS, KEY_FIELDS, what);
  if (record.kind !== PUBLIC_KEY_KIND) invalid(`${what}.kind is not ${PUBLIC_KEY_KIND}`);
  const principal = record.principal;
  if (typeof principal !== "string" || principal.length < 1 || principal.length > 256) invalid(`${what}.principal must be 1 to 256 characters`);
  const text = record.public_key;
  if (typeof text !== "string" || !BASE64_RE.test(text)) invalid(`${what}.public_key is not base64`);
  const raw = Buffer.from(text, "base64");
  if (raw.length !== 32) invalid(`${what}.public_key is ${raw.length} bytes, not 32`);
  const key = new VerifyKey(raw);
  if (record.key_id !== key.keyId) invalid(`${what}.key_id does not match its public key (derived ${key.keyId})`);
  return key;
}

/** The `gate` keys of a parsed registry document, by key id; throws {@link RegistryError}. */
export function gateKeysOf(doc: unknown): Map<string, VerifyKey> {
  const registry = exact(doc, ["schema", "entries", "retired", "passkeys"], ["schema", "entries"], "registry");
  if (registry.schema !== REGISTRY_SCHEMA) invalid(`registry.schema is not ${REGISTRY_SCHEMA}`);
  if (!Array.isArray(registry.entries)) invalid("registry.entries is not a list");
  const retired = registry.retired ?? [];
  if (!Array.isArray(retired)) invalid("registry.retired is not a list");
  const seen = new Set<string>();
  retired.forEach((item: unknown, i: number) => {
    const what = `registry.retired[${i}]`;
    const entry = exact(item, ENTRY_FIELDS, ["key", "role"], what);
    const key = publicKey(entry.key, `${what}.key`);
    if (seen.has(key.keyId)) invalid(`key ${key.keyId} is registered twice`);
    seen.add(key.keyId);
    if (entry.nats_user !== undefined && entry.nats_user !== null) invalid(`${what}: a retired key holds a bus credential`);
  });
  const gate = new Map<string, VerifyKey>();
  const approvers = new Set<string>();
  registry.entries.forEach((item: unknown, i: number) => {
    const what = `registry.entries[${i}]`;
    const entry = exact(item, ENTRY_FIELDS, ["key", "role"], what);
    const key = publicKey(entry.key, `${what}.key`);
    if (seen.has(key.keyId)) invalid(`key ${key.keyId} is registered twice`);
    seen.add(key.keyId);
    const role = entry.role;
    if (typeof role !== "string" || !ROLES.includes(role)) invalid(`${what}.role is not one of ${ROLES.join(", ")}`);
    if (role === "runtime" && (entry.runtime_id === undefined || entry.runtime_id === null)) invalid(`${what}: a runtime has no runtime_id`);
    if (role === "launcher" && (entry.runtime_id === undefined || entry.runtime_id === null)) invalid(`${what}: a launcher has no runtime_id`);
    if (role === "connector" && (entry.connector_id === undefined || entry.connector_id === null)) invalid(`${what}: a connector has no connector_id`);
    if (entry.nats_user !== undefined && entry.nats_user !== null && (typeof entry.nats_user !== "string" || !NKEY_USER_RE.test(entry.nats_user))) {
      invalid(`${what}.nats_user is not a NATS user nkey`);
    }
    if (role === "gate") gate.set(key.keyId, key);
    if (role === "approver") approvers.add((entry.key as Record<string, unknown>).principal as string);
  });
  const passkeys = registry.passkeys ?? [];
  if (!Array.isArray(passkeys)) invalid("registry.passkeys is not a list");
  const credentials = new Set<string>();
  passkeys.forEach((item: unknown, i: number) => {
    const what = `registry.passkeys[${i}]`;
    const passkey = exact(item, PASSKEY_FIELDS, PASSKEY_REQUIRED, what);
    if (typeof passkey.principal !== "string" || !approvers.has(passkey.principal)) invalid(`${what} names no approver of the registry`);
    if (typeof passkey.credential_id !== "string" || credentials.has(passkey.credential_id)) invalid(`${what}: a credential enrolled twice, or none`);
    credentials.add(passkey.credential_id);
  });
  if (gate.size === 0) throw new RegistryError("smf_gate_keys_missing", "the registry names no key with role gate");
  return gate;
}
