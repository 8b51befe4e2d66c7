/**
 * The gate's signed Verdicts: the twin of `smf_assurance/subjects/verdicts.py`.
 *
 * ARCHITECTURE.md, "Trust and identity on the bus": a receiver verifies what it
 * acts on against the keys the registry names for the role, here `gate`. The
 * hook runs a call on an `allow` read from `smf.propose`; were that reply plain
 * JSON, any client able to answer the subject (a NATS permission mistake, a
 * compromised service) could answer first and run what the policy denies. So
 * the gate answers with a DSSE envelope over the canonical Verdict, signed by
 * its key, and the plugin reads no field before {@link openGateVerdict} has
 * checked it. The same function opens approval outcomes (`outcome.ts`); only
 * the payload type differs, and DSSE signs the type with the payload, so an
 * outcome, an execute order or a checkpoint of the same key cannot be passed
 * off as a reply, nor a reply as an outcome.
 *
 * What the signature does not give: freshness. A genuine verdict names the
 * proposal it answers, a fresh random id per call, which {@link openVerdict}
 * compares with the one sent, so a recorded verdict answers no other call.
 */

import { canonicalBytes, parseCanonical } from "./canonical.js";
import { decodeEnvelope, MalformedPayloadError, verifyEnvelope } from "./dsse.js";
import type { VerifyKey } from "./keys.js";
import { denial, PAYLOAD_VERDICT, verdictFrom, type Verdict } from "./messages.js";

/** The reason code of a reply that does not verify as the gate's (`smf_assurance.subjects.verdicts.NOT_SIGNED_BY_GATE`). */
export const NOT_SIGNED_BY_GATE = "verdict_not_signed_by_gate";
/** The reason code of a gate-signed payload that is not one canonical Verdict. */
export const UNREADABLE_VERDICT = "unreadable_verdict";
/** The reason code of a gate-signed Verdict about another proposal (a replay). */
export const VERDICT_FOR_ANOTHER_PROPOSAL = "verdict_for_another_proposal";

/** A verified Verdict about another proposal than the one sent (`smf_assurance.subjects.verdicts.VerdictMismatchError`). */
export class VerdictMismatchError extends Error {
  override name = "VerdictMismatchError";
}

/**
 * Open a Verdict signed by one of `gateKeys` for `payloadType`, as
 * `smf_assurance.subjects.dsse.open_struct` does: throws a `dsse.ts` SignatureError subclass
 * (not an envelope, unsigned, unknown signer, forged, another payload type; an
 * empty `gateKeys` refuses everything), or {@link MalformedPayloadError} for a
 * verified payload that is not exactly the canonical JSON of a whole Verdict
 * (every field present, optional ones null, as the gate writes it): one
 * signed byte string has one reading, in both languages.
 */
export function openGateVerdict(data: Uint8Array, gateKeys: ReadonlyMap<string, VerifyKey>, payloadType: string): Verdict {
  const verified = verifyEnvelope(decodeEnvelope(data), gateKeys, 1, payloadType);
  let verdict: Verdict;
  try {
    verdict = verdictFrom(parseCanonical(verified.payload));
  } catch (error) {
    // Not JSON, not canonical (CanonicalJSONError), or not a Verdict (MessageError).
    throw new MalformedPayloadError(`verified payload is not a canonical Verdict: ${(error as Error).message}`);
  }
  if (!canonicalBytes(verdict).equals(verified.payload)) {
    throw new MalformedPayloadError("verified payload is not the canonical Verdict");
  }
  return verdict;
}

/** `smf_assurance.subjects.verdicts.open_verdict`: the gate's reply to `proposalId`, or a throw as {@link openGateVerdict}. */
export function openVerdict(data: Uint8Array, gateKeys: ReadonlyMap<string, VerifyKey>, proposalId: string): Verdict {
  const verdict = openGateVerdict(data, gateKeys, PAYLOAD_VERDICT);
  if (verdict.proposal_id !== proposalId) throw new VerdictMismatchError("the verdict names another proposal");
  return verdict;
}

/**
 * The reply to `proposalId` as the hook acts on it; never throws. A reply the
 * gate did not sign for `smf.propose` is a deny ({@link NOT_SIGNED_BY_GATE}),
 * so is a signed payload that is not a Verdict ({@link UNREADABLE_VERDICT}) and
 * the gate's Verdict of another proposal ({@link VERDICT_FOR_ANOTHER_PROPOSAL}),
 * as in `smf_assurance/adapters/client.py` `ProposalClient.send`. Anything unexpected is
 * also a deny: it fails closed.
 */
export function readVerdictReply(data: Uint8Array, gateKeys: ReadonlyMap<string, VerifyKey>, proposalId: string): Verdict {
  try {
    return openVerdict(data, gateKeys, proposalId);
  } catch (error) {
    if (error instanceof MalformedPayloadError) return denial(proposalId, UNREADABLE_VERDICT);
    if (error instanceof VerdictMismatchError) return denial(proposalId, VERDICT_FOR_ANOTHER_PROPOSAL);
    return denial(proposalId, NOT_SIGNED_BY_GATE);
  }
}
