/**
 * The signed outcome of a held call: the twin of `smf_assurance.subjects.approvals.open_outcome`.
 *
 * The gate publishes a held proposal's final Verdict on
 * `smf.approval.outcome.<approval hex>` as a DSSE envelope signed with the gate
 * key (payload type `application/vnd.smf.approval-outcome+json;v=1`). The
 * pending announcement makes the approval id, decision id and operation hash
 * public, so an unsigned outcome would let any bus client release a held call;
 * the adapter therefore acts on an outcome only after {@link openOutcome} has
 * checked, in this order (docs/SUBJECTS.md, ARCHITECTURE.md "Trust and identity
 * on the bus"):
 *
 * 1. a DSSE envelope signed by a trusted GATE key (registry role `gate`) for the
 *    approval-outcome payload type (the `dsse.ts` errors: unsigned, unknown
 *    signer, forged, signed for another purpose);
 * 2. its payload the canonical JSON of a whole Verdict (`MalformedPayloadError`);
 *    steps 1 and 2 are `verdicts.ts` {@link openGateVerdict}, which also opens
 *    the gate's reply on `smf.propose` (another payload type);
 * 3. final (`allow` or `deny`), naming an approval id that its own decision id
 *    derives (`approval_id_for`), and, when the caller knows them, exactly the
 *    approval, decision and operation of the held verdict
 *    ({@link OutcomeMismatchError}).
 */

import { SignatureError } from "./dsse.js";
import type { VerifyKey } from "./keys.js";
import { approvalIdFor, PAYLOAD_APPROVAL_OUTCOME, type Verdict } from "./messages.js";
import { openGateVerdict } from "./verdicts.js";

/**
 * A gate-signed outcome that is not about the call waiting for it: an authentic
 * outcome of one approval replayed on another's subject, one whose decision id
 * does not derive its approval id, one naming another decision or operation, or
 * one that is not final (`held`).
 */
export class OutcomeMismatchError extends SignatureError {
  override name = "OutcomeMismatchError";
}

export interface ExpectedOutcome {
  approvalId: string;
  decisionId: string;
  operationHash: string;
}

/** Verify an approval outcome; throws a {@link SignatureError} subclass for anything not to act on. */
export function openOutcome(
  data: Uint8Array,
  gateKeys: ReadonlyMap<string, VerifyKey>,
  expected?: ExpectedOutcome,
): Verdict {
  // Steps 1 and 2, shared with the reply on smf.propose (verdicts.ts).
  const verdict = openGateVerdict(data, gateKeys, PAYLOAD_APPROVAL_OUTCOME);
  const { approval_id: approvalId, decision_id: decisionId, operation_hash: operationHash } = verdict;
  if (verdict.outcome !== "allow" && verdict.outcome !== "deny") {
    throw new OutcomeMismatchError(`an outcome is allow or deny, not ${verdict.outcome}`);
  }
  if (approvalId === null || decisionId === null || operationHash === null) {
    throw new OutcomeMismatchError("the outcome does not name its approval, decision and operation");
  }
  if (approvalIdFor(decisionId) !== approvalId) {
    throw new OutcomeMismatchError("the outcome's decision is not its approval's decision");
  }
  if (expected !== undefined) {
    if (approvalId !== expected.approvalId) throw new OutcomeMismatchError("the outcome names another approval");
    if (decisionId !== expected.decisionId) throw new OutcomeMismatchError("the outcome names another decision");
    if (operationHash !== expected.operationHash) throw new OutcomeMismatchError("the outcome names another operation");
  }
  return verdict;
}
