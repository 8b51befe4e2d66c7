/**
 * The governed release, verified by the plugin itself (verification in every
 * consumer, before use): the twin of the Hermes adapter's verifier
 * (`smf_assurance/adapters/hermes/release.py`), running the checks of `contract/release.ts`
 * (the twin of `smf_assurance/subjects/release.py`).
 *
 * The plugin reads the newest `release.<sequence>` value of the `SMF_RELEASES`
 * key-value bucket over its own NATS connection ({@link readNewest}, the
 * JetStream API of the bucket's stream `KV_SMF_RELEASES`) and runs, in
 * Python's order ({@link ReleaseVerifier.verify}):
 *
 * 1. decode, bounded before parsing (`release_malformed`); a DSSE envelope
 *    signed by a threshold of DISTINCT keys of the operator's trust root for
 *    the release-manifest payload type (`release_bad_signature`,
 *    `release_below_threshold`); its payload the one canonical manifest, and a
 *    lease that ends after issue (`release_malformed`);
 * 2. every artifact matches its digest (`release_digest_mismatch`:
 *    mix-and-match);
 * 3. issued no later, and leased longer, than the latest true time the clock
 *    allows within the skew bound (`release_clock_untrusted`,
 *    `release_expired`: freeze);
 * 4. the release's registry is a valid `smf.registry/1` naming a gate key
 *    (`smf_registry_invalid`, `smf_gate_keys_missing`): the gate keys the plugin
 *    trusts for approval outcomes come from a VERIFIED release only;
 * 5. a sequence floor kept in memory (`release_rollback`): within one process
 *    the release used never goes backwards, and one sequence names one release.
 *
 * The floor moves only after every check passed. Not done here, and done by
 * the gate: a floor persisted across restarts, the prior-hash chain,
 * accumulated revocations, the projections' content. The gate refuses an
 * attestation naming another release than its own active one, so a release
 * the gate refused is refused for this runtime too.
 */

import { readFileSync } from "node:fs";
import { CLIENT_API } from "./contract/bus_access.js";
import type { VerifyKey } from "./contract/keys.js";
import { gateKeysOf, RegistryError } from "./contract/registry.js";
import {
  authenticateRelease,
  checkIssuedBefore,
  checkLeaseInForce,
  checkReleaseDigests,
  checkSequenceFloor,
  DEFAULT_MAX_SKEW_MS,
  RELEASE_BUCKET,
  RELEASE_KEY_PREFIX,
  ReleaseCheckError,
  releaseKeysNewestFirst,
  strictJson,
  TrustRootError,
  trustRootOf,
  type SequenceFloor,
  type TrustRoot,
} from "./contract/release.js";
import type { Bus } from "./transport.js";

export const RELEASE_STREAM = `KV_${RELEASE_BUCKET}`;
const KV_PREFIX = `$KV.${RELEASE_BUCKET}.`;
export const MAX_TRUST_ROOT_BYTES = 64 * 1024;
/** Deleted keys skipped before giving up (fail closed) when looking for the newest. */
export const MAX_KEYS_TRIED = 64;

/** A release that passed every check; its registry's gate keys are what the plugin trusts. */
export interface UsableRelease {
  releaseId: string;
  sequence: number;
  manifestHash: string;
  leaseExpiresAtMs: number;
  gateKeys: ReadonlyMap<string, VerifyKey>;
}

/** Read the operator's trust root file (the state directory's `release-trust-root.json`). */
export function loadTrustRoot(path: unknown): TrustRoot {
  if (typeof path !== "string" || path.length === 0) {
    throw new TrustRootError("smf_release_trust_root_missing", "set trustRootFile to the release trust root (release-trust-root.json)");
  }
  let data: Buffer;
  try {
    data = readFileSync(path);
  } catch (error) {
    throw new TrustRootError("smf_release_trust_root_unreadable", `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? "error"}`);
  }
  if (data.length > MAX_TRUST_ROOT_BYTES) throw new TrustRootError("smf_release_trust_root_invalid", "file too large");
  return trustRootOf(
    strictJson(data, "trust root", (d) => {
      throw new TrustRootError("smf_release_trust_root_invalid", d);
    }),
  );
}

/** The trust root, the clock and the in-memory sequence floor of one adapter. */
export class ReleaseVerifier {
  floor: SequenceFloor | undefined;

  constructor(
    private readonly root: TrustRoot,
    private readonly clock: () => number = Date.now,
    private readonly maxSkewMs = DEFAULT_MAX_SKEW_MS,
  ) {}

  /** Every check on `data`; throws {@link ReleaseCheckError} (or a `RegistryError`-derived one) naming the threat. */
  verify(data: Uint8Array): UsableRelease {
    const authenticated = authenticateRelease(data, this.root.keys, this.root.threshold);
    const manifest = authenticated.manifest;
    checkReleaseDigests(authenticated.bundle, manifest);
    const latest = this.clock() + this.maxSkewMs; // one clock reading for the time checks
    checkIssuedBefore(manifest.issued_at_ms, latest);
    checkLeaseInForce(manifest.lease_expires_at_ms, latest);
    let gateKeys: ReadonlyMap<string, VerifyKey>;
    try {
      gateKeys = gateKeysOf(strictJson(authenticated.bundle.registry, "registry", (d) => {
        throw new RegistryError("smf_registry_invalid", d);
      }));
    } catch (error) {
      if (error instanceof RegistryError) throw new ReleaseCheckError(error.reasonCode, `the release's registry: ${error.message}`);
      throw error;
    }
    // check for a rollback within this process: the floor never moves back
    this.floor = checkSequenceFloor(manifest, authenticated.manifestHash, this.floor);
    return {
      releaseId: manifest.release_id,
      sequence: manifest.sequence,
      manifestHash: authenticated.manifestHash,
      leaseExpiresAtMs: manifest.lease_expires_at_ms,
      gateKeys,
    };
  }
}

// -- the bucket ------------------------------------------------------------------------

export const UNAVAILABLE = "release_unavailable";

const unavailable = (detail: string): never => {
  throw new ReleaseCheckError(UNAVAILABLE, detail);
};

function jsReply(data: Uint8Array): Record<string, unknown> {
  const value = strictJson(data, "JetStream reply", (d) => unavailable(d));
  if (typeof value !== "object" || value === null || Array.isArray(value)) return unavailable("JetStream reply is not an object");
  return value as Record<string, unknown>;
}

/** `KV-Operation: DEL|PURGE` in a stored message's NATS header block. */
function isDeleteMarker(hdrs: unknown): boolean {
  if (typeof hdrs !== "string" || hdrs.length === 0) return false;
  const text = Buffer.from(hdrs, "base64").toString("latin1");
  return /^kv-operation:\s*(del|purge)\s*$/im.test(text);
}

/**
 * The value under the highest `release.<sequence>` key of the bucket, read with
 * the JetStream API of its stream (`STREAM.INFO` with a subject filter lists
 * the keys; `STREAM.MSG.GET` `last_by_subj` reads one). A deleted or purged key
 * is skipped. Throws {@link ReleaseCheckError} `release_unavailable` when there
 * is nothing to read (no JetStream, no bucket, no key, no reply).
 */
export async function readNewest(bus: Bus, timeoutMs: number): Promise<Uint8Array> {
  const ask = async (api: string, body: unknown): Promise<Record<string, unknown>> => {
    try {
      const reply = await bus.request(`${CLIENT_API}.${api}`, Buffer.from(JSON.stringify(body), "utf8"), timeoutMs);
      return jsReply(reply.data);
    } catch (error) {
      if (error instanceof ReleaseCheckError) throw error;
      return unavailable(error instanceof Error ? error.message : String(error));
    }
  };
  const info = await ask(`STREAM.INFO.${RELEASE_STREAM}`, { subjects_filter: `${KV_PREFIX}${RELEASE_KEY_PREFIX}>` });
  if (info.error !== undefined) unavailable(`no release bucket: ${JSON.stringify(info.error).slice(0, 200)}`);
  const subjects = (info.state as { subjects?: unknown } | undefined)?.subjects;
  const names = typeof subjects === "object" && subjects !== null ? Object.keys(subjects) : [];
  const keys = releaseKeysNewestFirst(names.filter((s) => s.startsWith(KV_PREFIX)).map((s) => s.slice(KV_PREFIX.length)));
  for (const key of keys.slice(0, MAX_KEYS_TRIED)) {
    const got = await ask(`STREAM.MSG.GET.${RELEASE_STREAM}`, { last_by_subj: `${KV_PREFIX}${key}` });
    if (got.error !== undefined) continue; // purged since listed: the next older key
    const message = got.message as { data?: unknown; hdrs?: unknown } | undefined;
    if (message === undefined || isDeleteMarker(message.hdrs)) continue;
    // whatever is there is verified (an empty one fails)
    return typeof message.data === "string" ? Buffer.from(message.data, "base64") : Buffer.alloc(0);
  }
  return unavailable("the release bucket holds no release");
}
