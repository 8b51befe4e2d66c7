/**
 * Runtime start-up attestation: the twin of `smf_assurance/subjects/attestation.py`
 * (`RuntimeAttestation`, sent signed on `smf.attest`).
 *
 * The signed payload is the canonical JSON of the Python Struct's
 * `msgspec.to_builtins` form, which the gate re-derives and compares byte for
 * byte: every field present, `verified_release_id` as `null` when none, and
 * `instance_id` (additive, `omit_defaults`) present only when set, so an
 * attestation without one encodes exactly as before the field existed
 * (docs/SUBJECTS.md, "Additive optional fields"; golden vectors
 * `tests/vectors/messages.json`, `runtime_attestation_*`).
 */

import { MessageError } from "./messages.js";
import { INSTANCE_ID_RE } from "./model_gateway.js";

/** `smf_assurance.subjects.names.ATTEST`. */
export const ATTEST = "smf.attest";
/** `smf_assurance.subjects.names.PAYLOAD_ATTESTATION`. */
export const PAYLOAD_ATTESTATION = "application/vnd.smf.runtime-attestation+json;v=1";

export type Profile = "block-only" | "exact-hold";

export interface StreamingSetting {
  surface: string;
  enabled: boolean;
}

export interface RuntimeAttestation {
  schema: "smf.runtime-attestation/1";
  attestation_id: string;
  runtime_id: string;
  runtime_version: string;
  runtime_pin: string;
  adapter_id: string;
  adapter_version: string;
  profile: Profile;
  hooks_present: string[];
  hooks_missing: string[];
  streaming: StreamingSetting[];
  verified_release_id: string | null;
  problems: string[];
  issued_at_ms: number;
  /** The adapter's process (`smf_assurance.subjects.model_gateway`); absent when the adapter names none. */
  instance_id?: string;
}

export type AttestationFields = Omit<RuntimeAttestation, "schema" | "instance_id"> & { instance_id?: string | undefined };

/** The attestation as Python writes it: `instance_id` only when set, and then a valid instance id. */
export function runtimeAttestation(fields: AttestationFields): RuntimeAttestation {
  const { instance_id: instanceId, ...rest } = fields;
  const attestation: RuntimeAttestation = { schema: "smf.runtime-attestation/1", ...rest };
  if (instanceId !== undefined) {
    if (!INSTANCE_ID_RE.test(instanceId)) throw new MessageError("attestation_invalid", "instance_id");
    attestation.instance_id = instanceId;
  }
  return attestation;
}
