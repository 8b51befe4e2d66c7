/**
 * Binding model requests to this process (docs/OPENCLAW.md, "Binding
 * model requests to the process"): the provider `smf-gateway` and its stream
 * wrappers, which put this process's {@link InstanceProof} on every model request
 * (header `Smf-Instance-Proof`), the twin of the Hermes adapter's `llm_request`
 * middleware (`smf_assurance/adapters/hermes/hooks/model_request.py`).
 *
 * The model gateway admits a runtime by its bearer token while the gate holds a
 * fresh attestation for the runtime id. The token lives in OpenClaw's config, so
 * another OpenClaw process of the same runtime id with our plugin disabled, or
 * `openclaw agent exec` (plugins in discovery mode, no tool hooks: finding 1),
 * holds it too. Our attestation names a random instance id drawn once per process
 * ({@link ProcessBinding}); the gate then serves this runtime only for a fresh
 * proof, signed by the runtime key, of an instance it accepted.
 *
 * Invariants, each kept where it is named:
 * - The wrapper signs only while this process registered the plugin in `full` mode
 *   AND the gate accepted this process's latest attestation (and its lease has not
 *   ended): {@link InstanceProver.proofNow}. OpenClaw runs provider hooks from a
 *   `discovery` registration even in a full process, and `agent exec` runs them
 *   too (research, run), so the decision is read from process state at call time,
 *   never from the mode of the registration that created the wrapper.
 * - That state lives on `globalThis` under one symbol: OpenClaw may register the
 *   plugin more than once per process, from module instances it loads on its own
 *   terms; one process, one instance id, one decision.
 * - Nothing here can let a request through unproven: every failure ends in "no
 *   header", which the gateway refuses (`instance_proof_missing`). The wrapper never
 *   throws on our account; the request itself is OpenClaw's, unchanged otherwise.
 * - Every request gets its own proof, with a fresh nonce: the gate accepts a proof
 *   once and within seconds, so a proof captured on the way is good for nothing but
 *   the request it came with. It names no request digest: the stream wrapper sees
 *   OpenClaw's own context, not the messages its provider serializes (the request
 *   the gateway digests), docs/OPENCLAW.md. Its value is never logged.
 */

import type { Signer } from "./contract/keys.js";
import { HEADER_INSTANCE_PROOF, instanceProof, newInstanceId, newProofNonce, sealInstanceProof } from "./contract/model_gateway.js";

/** The provider id the operator configures the model gateway under (`models.providers.smf-gateway`). */
export const PROVIDER_ID = "smf-gateway";
/** Longest a model call waits for this process's first attestation still in flight. */
export const FIRST_ATTESTATION_WAIT_MS = 10_000;

/** Why a request goes without a proof (logged, once per change). */
export type NoProof = "not_full_registration" | "not_attested" | "attestation_refused" | "attestation_lease_ended" | "proof_not_sealed";

/** This process's side of the binding: what the wrapper decides from. */
export interface ProcessBinding {
  /** Drawn once per process, attested, proven. */
  readonly instanceId: string;
  /** A `register()` in "full" mode ran in this process. */
  full: boolean;
  /** The gate's answer to this process's latest attestation: accepted (with the key that signed it), or refused. */
  attested:
    | { accepted: true; runtimeId: string; key: Signer; expiresAtMs: number | null }
    | { accepted: false }
    | undefined;
  /** An attestation on its way to the gate (a first model call may wait for it). */
  pending: Promise<unknown> | undefined;
  /**
   * Problems an adapter of this process found at run time (a foreign hook, a hook
   * budget cut): every attestation of the process carries them, whichever of its
   * adapters sends it, so the gate's latest word on the process cannot flip back
   * to "accepted" because another module instance attested without them.
   */
  problems: string[];
}

const BINDING = Symbol.for("smf-assurance.process-binding");

/** The process's binding, made on first use. */
export function processBinding(): ProcessBinding {
  const holder = globalThis as unknown as Record<symbol, ProcessBinding | undefined>;
  let binding = holder[BINDING];
  if (binding === undefined) {
    binding = newProcessBinding();
    holder[BINDING] = binding;
  }
  return binding;
}

/** A fresh binding, for tests. */
export function newProcessBinding(): ProcessBinding {
  return { instanceId: newInstanceId(), full: false, attested: undefined, pending: undefined, problems: [] };
}

/** Record the gate's answer to this process's attestation (`attest.ts`). */
export function noteAttestation(
  binding: ProcessBinding,
  runtimeId: string,
  key: Signer,
  ack: { accepted: boolean; expires_at_ms: number | null },
): void {
  binding.attested = ack.accepted ? { accepted: true, runtimeId, key, expiresAtMs: ack.expires_at_ms } : { accepted: false };
}

/** OpenClaw's stream function (`StreamFn`, 2026.9.6): it may answer with a stream or a promise of one. */
export type StreamFn = (model: unknown, context: unknown, options?: StreamOptions) => unknown;
export interface StreamOptions {
  headers?: Record<string, string>;
  [key: string]: unknown;
}

interface Log {
  info(m: string): void;
  warn(m: string): void;
}

export class InstanceProver {
  private said: string | undefined;

  constructor(
    readonly binding: ProcessBinding,
    private readonly log: Log,
    private readonly clock: () => number = Date.now,
    private readonly waitMs: number = FIRST_ATTESTATION_WAIT_MS,
  ) {}

  /** Why no proof can be made now, or undefined when one can. */
  private refusal(now: number): NoProof | undefined {
    const b = this.binding;
    // agent exec, or any process that never registered us in full mode: no proof
    if (!b.full) return "not_full_registration";
    if (b.attested === undefined) return "not_attested";
    if (!b.attested.accepted) return "attestation_refused";
    // the gate would not serve past the lease it named; say so here first
    if (b.attested.expiresAtMs !== null && now >= b.attested.expiresAtMs) return "attestation_lease_ended";
    return undefined;
  }

  /** The header value to send now, or undefined (the request then goes without one and is refused). Never throws. */
  proofNow(): string | undefined {
    let outcome: NoProof | "proving";
    let value: string | undefined;
    try {
      const now = this.clock();
      const refusal = this.refusal(now);
      if (refusal !== undefined) {
        outcome = refusal;
      } else {
        const attested = this.binding.attested as { runtimeId: string; key: Signer };
        value = sealInstanceProof(instanceProof(attested.runtimeId, this.binding.instanceId, now, newProofNonce()), attested.key);
        outcome = "proving";
      }
    } catch {
      value = undefined;
      outcome = "proof_not_sealed";
    }
    this.say(outcome);
    return value;
  }

  /** Whether a model call should wait: full, no answer yet, an attestation in flight. */
  private shouldWait(): boolean {
    const b = this.binding;
    return b.full && b.attested === undefined && b.pending !== undefined;
  }

  /** The in-flight attestation settled, or {@link waitMs} passed; never rejects. */
  private settled(): Promise<void> {
    const pending = this.binding.pending ?? Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, this.waitMs);
      timer.unref();
      pending.then(
        () => (clearTimeout(timer), resolve()),
        () => (clearTimeout(timer), resolve()),
      );
    });
  }

  /**
   * Wrap OpenClaw's stream: each call gets this process's proof in its headers, or
   * nothing. `mayWait`: the call may answer with a promise (the embedded agent's
   * stream awaits it; `completeSimple` does not, so its wrapper never waits).
   */
  wrap(inner: StreamFn | undefined, mayWait: boolean): StreamFn | undefined {
    if (typeof inner !== "function") return undefined; // OpenClaw's own stream, unproven: refused
    const call = (model: unknown, context: unknown, options?: StreamOptions): unknown => {
      let proven = options;
      try {
        proven = withProof(options, this.proofNow());
      } catch {
        proven = options; // no proof: refused at the gateway
      }
      return inner(model, context, proven);
    };
    return (model, context, options) => {
      let wait = false;
      try {
        wait = mayWait && this.shouldWait();
      } catch {
        wait = false;
      }
      if (!wait) return call(model, context, options);
      return this.settled().then(() => call(model, context, options));
    };
  }

  private say(outcome: NoProof | "proving"): void {
    if (outcome === this.said) return;
    this.said = outcome;
    try {
      if (outcome === "proving") {
        this.log.info(`smf instance proof: model requests of this process carry its proof (instance ${this.binding.instanceId})`);
      } else {
        this.log.warn(`smf instance proof NOT added to model requests (${outcome}): the model gateway refuses them`);
      }
    } catch {
      // a logger that throws changes nothing about the request
    }
  }
}

/** `options` with `proof` as the one {@link HEADER_INSTANCE_PROOF} header; `options` unchanged without a proof. */
export function withProof(options: StreamOptions | undefined, proof: string | undefined): StreamOptions | undefined {
  if (proof === undefined) return options;
  const headers: Record<string, string> = { ...(options?.headers ?? {}) };
  for (const name of Object.keys(headers)) {
    // one spelling of the header: ours
    if (name.toLowerCase() === HEADER_INSTANCE_PROOF.toLowerCase()) delete headers[name];
  }
  headers[HEADER_INSTANCE_PROOF] = proof;
  return { ...(options ?? {}), headers };
}
