/**
 * Start-up attestation and the governed release, for the OpenClaw plugin
 * (issues 10 and 6): the twin of the Hermes adapter's `_attest_once`,
 * `_attest_forever` and `_ensure_attested` (`smf_assurance/adapters/hermes/lifecycle.py`).
 *
 * {@link Governance} holds what the plugin verified itself: the newest release
 * of the `SMF_RELEASES` bucket (`release.ts`), checked before every
 * attestation, and the gate's last attestation ack. It sends a signed
 * `RuntimeAttestation` (`smf_assurance.subjects.attestation`, profile `exact-hold`) on
 * `smf.attest` when the adapter starts, every `attestIntervalMs` afterwards,
 * and in line before a proposal while it has not attested, while no release
 * verifies, or after the gate said the attested release is not its active one.
 *
 * Fail closed: the gate keys an approval outcome may be signed with are the
 * `gate` keys of the registry of the release verified LAST, and none while no
 * release is verified or its lease ran out (then every call is blocked with
 * the release's reason code). A gate that requires attestation
 * (`smf_assurance.ops.runtimes.provision.provision_openclaw_runtime`) refuses every proposal of this
 * runtime until an attestation is accepted: an OpenClaw surface that never
 * loads the plugin (`openclaw agent exec`) never attests, so it is visible,
 * and refused, at the gate.
 */

import { randomBytes } from "node:crypto";
import { noteAttestation, processBinding, type ProcessBinding } from "./binding.js";
import { ATTEST, PAYLOAD_ATTESTATION, runtimeAttestation, type RuntimeAttestation } from "./contract/attestation.js";
import { encodeEnvelope, signValue } from "./contract/dsse.js";
import type { Signer, VerifyKey } from "./contract/keys.js";
import { checkLeaseInForce, DEFAULT_MAX_SKEW_MS, ReleaseCheckError, type TrustRoot } from "./contract/release.js";
import { readNewest, ReleaseVerifier, UNAVAILABLE, type UsableRelease } from "./release.js";
import { BusError, type Bus } from "./transport.js";

export { ATTEST, PAYLOAD_ATTESTATION };
export const PROFILE = "exact-hold";
export const ADAPTER_VERSION = "0.1.0";
export const RELEASE_MISMATCH = "runtime_release_mismatch";
const REFUSED_RETRY_MS = 5_000;
const FIRST_RETRY_MS = 1_000;

export interface AttestationAck {
  attestation_id: string;
  accepted: boolean;
  reason_codes: string[];
  expires_at_ms: number | null;
  release_id: string | null;
}

/** What the adapter needs from governance; a stand-in in unit tests. */
export interface Governed {
  /** Attest (checking the release first) when needed before a proposal; throws {@link BusError}. */
  ensure(): Promise<void>;
  /** Why the adapter refuses right now (a release reason code), or undefined. */
  refusal(): string | undefined;
  /** The gate keys of the verified release in force (empty otherwise). */
  gateKeys(): ReadonlyMap<string, VerifyKey>;
  /** A verdict arrived: a gate that moved to another release makes us re-attest first. */
  noteVerdict(reasonCodes: readonly string[]): void;
  /**
   * A problem found at run time (a foreign hook): kept for good by the whole process
   * (every adapter's attestations carry it), attested at once. True the first time
   * this problem is noted in the process.
   */
  noteProblem(problem: string): boolean;
}

export interface GovernanceSettings {
  runtimeId: string;
  runtimeVersion: string;
  runtimePin: string;
  adapterId: string;
  key: Signer;
  trustRoot: TrustRoot;
  gateTimeoutMs: number;
  attestIntervalMs: number;
}

interface Log {
  info(m: string): void;
  warn(m: string): void;
  error(m: string): void;
}

export class Governance implements Governed {
  release: UsableRelease | undefined;
  releaseProblem: string | undefined;
  lastAck: AttestationAck | undefined;
  hooksPresent: string[] = [];
  hooksMissing: string[] = [];
  /** Problems the adapter refuses to run with (config, pin, hook budget): non-empty means refused. */
  problems: string[] = [];
  private readonly verifier: ReleaseVerifier;
  private attested = false;
  private inFlight: Promise<AttestationAck> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    readonly settings: GovernanceSettings,
    private readonly bus: Bus,
    private readonly log: Log,
    private readonly clock: () => number = Date.now,
    /** This process's instance (`binding.ts`): attested here, proven on model requests. */
    readonly binding: ProcessBinding = processBinding(),
  ) {
    this.verifier = new ReleaseVerifier(settings.trustRoot, clock);
  }

  /** The release reason to refuse, or `release_expired` once the verified lease ran out. */
  refusal(): string | undefined {
    if (this.releaseProblem !== undefined) return this.releaseProblem;
    const release = this.release;
    if (release === undefined) return "release_not_verified";
    try {
      // check for a freeze attack between two reads: the lease, now
      checkLeaseInForce(release.leaseExpiresAtMs, this.clock() + DEFAULT_MAX_SKEW_MS);
    } catch (error) {
      return error instanceof ReleaseCheckError ? error.reasonCode : "release_expired";
    }
    return undefined;
  }

  gateKeys(): ReadonlyMap<string, VerifyKey> {
    return this.release !== undefined && this.refusal() === undefined ? this.release.gateKeys : new Map();
  }

  /** Read the newest release and verify it; never throws. */
  async checkRelease(): Promise<void> {
    let usable: UsableRelease;
    try {
      usable = this.verifier.verify(await readNewest(this.bus, this.settings.gateTimeoutMs));
    } catch (error) {
      const reason = error instanceof ReleaseCheckError ? error.reasonCode : UNAVAILABLE;
      this.release = undefined;
      if (this.releaseProblem !== reason) {
        this.log.error(
          `SMF Assurance adapter REFUSES to run (${reason}: the governed release did not verify: ` +
            `${error instanceof Error ? error.message : String(error)}). Every tool call will be BLOCKED until a release verifies.`,
        );
      }
      this.releaseProblem = reason;
      return;
    }
    if (this.releaseProblem !== undefined || this.release?.manifestHash !== usable.manifestHash) {
      this.log.info(`smf release verified by the adapter: ${usable.releaseId} #${usable.sequence}`);
    }
    this.release = usable;
    this.releaseProblem = undefined;
  }

  /** The attestation this adapter would sign now; it names this process's instance (issue 16). */
  attestation(): RuntimeAttestation {
    const refusal = this.refusal();
    const problems = [...new Set([...this.problems, ...this.binding.problems, ...(refusal === undefined ? [] : [refusal])])];
    return runtimeAttestation({
      attestation_id: "a-" + randomBytes(16).toString("hex"),
      runtime_id: this.settings.runtimeId,
      runtime_version: this.settings.runtimeVersion,
      runtime_pin: this.settings.runtimePin,
      adapter_id: this.settings.adapterId,
      adapter_version: ADAPTER_VERSION,
      profile: PROFILE,
      hooks_present: [...this.hooksPresent],
      hooks_missing: [...this.hooksMissing],
      streaming: [],
      verified_release_id: this.release !== undefined && refusal === undefined ? this.release.releaseId : null,
      problems,
      issued_at_ms: this.clock(),
      instance_id: this.binding.instanceId,
    });
  }

  /** Check the release, then attest; throws {@link BusError} when the gate does not answer. */
  attestOnce(): Promise<AttestationAck> {
    if (this.inFlight === undefined) {
      const inFlight = this.doAttest().finally(() => {
        this.inFlight = undefined;
        if (this.binding.pending === inFlight) this.binding.pending = undefined;
      });
      this.inFlight = inFlight;
      this.binding.pending = inFlight;
    }
    return this.inFlight;
  }

  private async doAttest(): Promise<AttestationAck> {
    await this.checkRelease();
    const signed = encodeEnvelope(signValue(PAYLOAD_ATTESTATION, this.attestation(), [this.settings.key]));
    const reply = await this.bus.request(ATTEST, signed, this.settings.gateTimeoutMs);
    let ack: AttestationAck;
    try {
      const value = JSON.parse(Buffer.from(reply.data).toString("utf8")) as Record<string, unknown>;
      if (typeof value.accepted !== "boolean" || !Array.isArray(value.reason_codes)) throw new Error("not an ack");
      ack = {
        attestation_id: String(value.attestation_id ?? ""),
        accepted: value.accepted,
        reason_codes: value.reason_codes.map(String),
        expires_at_ms: typeof value.expires_at_ms === "number" ? value.expires_at_ms : null,
        release_id: typeof value.release_id === "string" ? value.release_id : null,
      };
    } catch {
      throw new BusError("gate_transport_error", "the attestation ack does not decode");
    }
    const previous = this.lastAck;
    this.lastAck = ack;
    this.attested = true;
    // the model-request proof follows the gate's latest word on this process (binding.ts)
    noteAttestation(this.binding, this.settings.runtimeId, this.settings.key, ack);
    const same = previous !== undefined && previous.accepted === ack.accepted && previous.reason_codes.join() === ack.reason_codes.join();
    if (!same) {
      const line = `smf attestation ${ack.accepted ? "accepted" : "REFUSED"} by the gate: reasons=${ack.reason_codes.join(",") || "-"} release=${ack.release_id ?? "-"}`;
      if (ack.accepted) this.log.info(line);
      else this.log.error(line);
    }
    return ack;
  }

  /** Attest in line before a proposal when not attested, no release verifies, or the gate moved on. */
  async ensure(): Promise<void> {
    this.start(this.settings.attestIntervalMs); // a hook was called: keep attesting from now on (it attests below)
    const ack = this.lastAck;
    const mismatch = ack !== undefined && ack.reason_codes.includes(RELEASE_MISMATCH);
    // an accepted attestation about to run out at the gate is renewed first
    const lapsing = ack !== undefined && ack.expires_at_ms !== null && this.clock() + this.settings.gateTimeoutMs >= ack.expires_at_ms;
    if (this.attested && !mismatch && !lapsing && this.releaseProblem === undefined) return;
    await this.attestOnce();
  }

  noteVerdict(reasonCodes: readonly string[]): void {
    if (reasonCodes.includes(RELEASE_MISMATCH)) this.attested = false;
  }

  noteProblem(problem: string): boolean {
    // process-wide (binding.ts): OpenClaw runs several module instances of this plugin per process
    if (this.binding.problems.includes(problem)) return false;
    this.binding.problems = [...this.binding.problems, problem];
    this.attestOnce().catch((error: unknown) => {
      this.log.warn(`smf attestation not delivered: ${error instanceof BusError ? error.reasonCode : String(error)}`);
    });
    return true;
  }

  /** Attest after `firstMs`, then every `attestIntervalMs` (sooner while unattested or refused); timers are unref'd. */
  start(firstMs = 0): void {
    if (this.timer !== undefined || this.stopped) return;
    const tick = async (): Promise<void> => {
      try {
        await this.attestOnce();
      } catch (error) {
        this.log.warn(`smf attestation not delivered: ${error instanceof BusError ? error.reasonCode : String(error)}`);
      }
      if (this.stopped) return;
      let interval = this.settings.attestIntervalMs;
      if (!this.attested) interval = FIRST_RETRY_MS;
      else if (this.lastAck === undefined || !this.lastAck.accepted) interval = Math.min(interval, REFUSED_RETRY_MS);
      this.timer = setTimeout(() => void tick(), interval);
      this.timer.unref();
    };
    this.timer = setTimeout(() => void tick(), firstMs);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
  }
}
