"""The survivors of ``make mutate`` reviewed as equivalent or harmless, and why.

A survivor listed here is reported with its reason; one that is not fails the
run. A mutant that any test could kill never belongs here: it gets a test.
"""

from __future__ import annotations

from typing import Final

_RESOURCE_BOUND: Final = (
    "harmless: a resource bound (size or count) moved by one; no check of signatures, "
    "digests, sequences or requirements depends on its exact value"
)
_DECIDED_INDEX: Final = (
    "harmless: a bound of the gate's index of decided tool calls moved by one; only an "
    "id added for a verified proposal or a recorded refusal is ever covered, so a "
    "smaller index forgets a decided call sooner (its result then stops the runtime: "
    "stricter) and a larger one holds more; the eviction order is tested with small bounds"
)
_TESTED_BOUND: Final = _RESOURCE_BOUND + ", and the comparison with it is boundary-tested"
_GRANT_TIME_CHECKED: Final = (
    "equivalent: a grant of no time or less (its end at or before its issue) is refused by "
    "the next check, which takes the gate's clock to be before the grant's end and no more "
    "than a minute before its issue; a grant of one millisecond is accepted (tested)"
)
_UNREACHABLE_ONLY: Final = (
    "equivalent: approval_id is the primary key, so a single-approval write changes at "
    "most one row and this branch cannot run"
)
_REFUSAL_REACHED: Final = (
    "equivalent: reached only when the conditional UPDATE matched no row although the row "
    "exists, is in the source state, is unexpired and (claim) has every expected field, "
    "so its digest differs; the final 'matched no row' refusal is unreachable"
)
_PURE_CACHE: Final = (
    "equivalent: the outcome cache only saves work; _outcome is a pure function of the "
    "applied policies, so a cached and a recomputed outcome are equal"
)
_POSITIVE_CLOCK: Final = (
    "equivalent: the default 0 (or 1, or -1) only meets max() or a comparison with a "
    "unix-ms clock reading, which is never that small"
)
_FULL_WALK: Final = (
    "equivalent: a value the fast path no longer takes goes through the full canonical "
    "walk, which gives the same bytes (tested against the walk, the golden vectors and "
    "the RFC 8785 oracle); only speed changes"
)

_STANDING_HOLDS: Final = (
    "equivalent: AttestationDesk.standing returns no reason only with the attestation it "
    "holds (its one reason-less return is (None, held) after held is None was refused), "
    "so with no reason the attestation is never None, and a refusal always has its reason"
)

_SWEEP_ONLY: Final = (
    "harmless: only how soon ended admissions are dropped from memory; none is served "
    "after its end, as both lookups compare it with now (the sweep dropping every kept "
    "admission is killed: others stay kept while one runtime is asked about)"
)
_QUESTION_ID: Final = (
    "harmless: the random part of the admission question's id, 16 bytes; a byte more or "
    "less is still a unique id the gate accepts, and the answer is matched to it whole"
)

EQUIVALENT: Final[dict[tuple[str, str, str, str, str], str]] = {
    ("predicates", "necessary", "int", "1", "0"): (
        "equivalent: each[0:] includes each[0], and intersecting a set with itself is the set"
    ),
    ("policy", "SEVERITY", "int", "0", "-1"): (
        "equivalent: SEVERITY is only compared with itself; -1 < 1 < 2 keeps "
        "allow < conditional < deny"
    ),
    ("policy", "SEVERITY", "int", "2", "3"): (
        "equivalent: SEVERITY is only compared with itself; 0 < 1 < 3 keeps "
        "allow < conditional < deny"
    ),
    (
        "policy",
        "merge_disposition",
        "cmp",
        "SEVERITY[effect] > SEVERITY[worst]",
        "SEVERITY[effect] >= SEVERITY[worst]",
    ): (
        "equivalent: SEVERITY is one-to-one, so an effect as severe as the worst is the same effect"
    ),
    ("evaluator", "_OUTCOME_CACHE_LIMIT", "int", "4096", "4095"): (
        "harmless: the outcome cache holds one entry fewer; " + _PURE_CACHE
    ),
    (
        "evaluator",
        "evaluate",
        "drop-operand",
        "op_hash or operation_hash(envelope)",
        "operation_hash(envelope)",
    ): (
        "equivalent: callers pass the normalize stage's operation_hash of this same "
        "envelope; recomputing it gives the same hash"
    ),
    ("evaluator", "_outcome_of", "if-true", "outcome is None", "True"): _PURE_CACHE,
    (
        "evaluator",
        "_outcome_of",
        "if-false",
        "len(policy_set.outcomes) < _OUTCOME_CACHE_LIMIT",
        "False",
    ): _PURE_CACHE,
    ("evaluator", "_applied", "if-true", "gated", "True"): (
        "equivalent: with no confinement policy in the release, no applied policy is "
        "gated, so others equals applied and the branch below returns applied's outcome "
        "either way; only work changes"
    ),
    ("evaluator", "_applied", "if-true", "len(others) != len(applied)", "True"): (
        "equivalent: when no confinement policy applied, others is applied, so returning "
        "others with its outcome is returning applied with its outcome"
    ),
    ("normalize", "NormalizationError.__init__", "if-true", "detail", "True"): (
        "harmless: only the message of a refusal without detail changes (a trailing ': '); "
        "its reason code does not"
    ),
    ("release_trust", "VerifiedRelease.accepted_state", "int", "0", "1"): _POSITIVE_CLOCK,
    ("release_trust", "VerifiedRelease.accepted_state", "int", "0", "-1"): _POSITIVE_CLOCK,
    ("release_trust", "check_in_force", "int", "0", "1"): _POSITIVE_CLOCK,
    ("release_trust", "check_in_force", "int", "0", "-1"): _POSITIVE_CLOCK,
    ("release_trust", "ReleaseTrust.verify_update", "int", "0", "1"): _POSITIVE_CLOCK,
    ("release_trust", "ReleaseTrust.verify_update", "int", "0", "-1"): _POSITIVE_CLOCK,
    (
        "approval_rules",
        "signed_by_executor",
        "drop-operand",
        "runtime_id is not None and report.connector_id == runtime_id and report.order_id == "
        "order_id_for(binding.operation_hash, binding.decision_id) and any(p.entry.role == "
        '"runtime" and p.entry.runtime_id == runtime_id for p in signers)',
        "report.connector_id == runtime_id and report.order_id == order_id_for("
        "binding.operation_hash, binding.decision_id) and any((p.entry.role == 'runtime' and "
        "p.entry.runtime_id == runtime_id for p in signers))",
    ): (
        "equivalent: a report's connector_id is a ConnectorId, never None, so it cannot equal "
        "a runtime_id of None; the explicit test narrows the type"
    ),
    ("approval_claim_sqlite", "_only", "if-false", "len(rows) > 1", "False"): _UNREACHABLE_ONLY,
    ("approval_claim_sqlite", "_only", "int", "1", "2"): _UNREACHABLE_ONLY,
    (
        "approval_claim_sqlite",
        "_only",
        "raise",
        'raise ApprovalStoreUnavailable("a single-approval write changed several rows")',
        "pass",
    ): _UNREACHABLE_ONLY,
    ("approval_claim_sqlite", "_only", "int", "0", "-1"): (
        "equivalent: rows holds at most one row (primary key), so rows[-1] is rows[0]"
    ),
    ("approval_claim_sqlite", "_refusal", "if-true", "refusal is not None", "True"): (
        _REFUSAL_REACHED + " (step_refusal never answers None here)"
    ),
    (
        "approval_claim_sqlite",
        "_refusal",
        "if-true",
        "isinstance(refusal, ApprovalExpired)",
        "True",
    ): (
        "equivalent: _EXPIRE_ONE moves a row only where state = source and "
        "expires_at_ms <= now_ms, which is exactly when step_refusal answers "
        "ApprovalExpired; for any other refusal the UPDATE matches no row"
    ),
    ("approval_claim_sqlite", "SqliteApprovalStore._resolve.body", "if-true", "reasons", "True"): (
        "equivalent: no reasons are stored as '[]' instead of NULL, and _codes, the one "
        "reader of the column, reads both as ()"
    ),
    (
        "approval_claim_sqlite",
        "_refusal",
        "return",
        'return IllegalTransition( f"approval {approval_id}: conditional update matched no '
        'row", approval_id=approval_id )',
        "return None",
    ): _REFUSAL_REACHED,
    ("canonical", "_ENCODER", "bool", "allow_nan=False", "allow_nan=True"): (
        "equivalent: no float reaches the encoder; _normalize refuses every float, NaN and "
        "infinities included"
    ),
    ("canonical", "_ENCODER", "bool", "check_circular=False", "check_circular=True"): (
        "equivalent: _normalize builds a fresh value in which a cycle cannot survive "
        "(it hits MAX_DEPTH); the check only costs time"
    ),
    ("canonical", "_SORTED_ENCODER", "bool", "allow_nan=False", "allow_nan=True"): (
        "equivalent: the sorted encoder only sees _is_plain values, and _is_plain answers "
        "False for every float"
    ),
    ("canonical", "_SORTED_ENCODER", "bool", "check_circular=False", "check_circular=True"): (
        "equivalent: the sorted encoder only sees _is_plain values, and a cycle is deeper "
        "than MAX_DEPTH, which _is_plain answers False for; the check only costs time"
    ),
    ("canonical", "_is_plain", "cmp", "depth > MAX_DEPTH", "depth >= MAX_DEPTH"): _FULL_WALK,
    ("canonical", "_is_plain", "return", "return False", "return None"): (
        "equivalent: every caller reads the answer as a truth value, and None is false"
    ),
    (
        "canonical",
        "_is_plain",
        "cmp",
        "-SAFE_INTEGER_MAX <= number <= SAFE_INTEGER_MAX",
        "-SAFE_INTEGER_MAX <= number < SAFE_INTEGER_MAX",
    ): _FULL_WALK,
    ("canonical", "_is_plain", "int", "1", "2"): _FULL_WALK,
    ("canonical", "canonical_bytes", "if-false", "_is_plain(value, 0)", "False"): _FULL_WALK,
    ("canonical", "canonical_bytes", "int", "0", "1"): (
        _FULL_WALK + " (for _is_plain(value, 0); the same key names the full walk's "
        "_normalize(value, '$', 0) -> 1, which refuses MAX_DEPTH levels and is killed by "
        "tests/unit/test_canonical.py::test_the_depth_limit_is_the_same_on_the_fast_path_"
        "and_the_full_walk)"
    ),
    (
        "canonical",
        "_normalize",
        "drop-operand",
        "value is None or isinstance(value, bool)",
        "value is None",
    ): "equivalent: a bool is an int in the safe range, which the next branch returns as is",
    ("canonical", "struct_identity", "if-false", "raw.isascii()", "False"): (
        "equivalent: the full canonical path gives the same bytes as the ASCII fast path "
        "(tested against identity_of); only speed changes"
    ),
    ("dsse", "MAX_ENVELOPE_BYTES", "int", "1024 * 1024", "1048577"): _TESTED_BOUND,
    ("dsse", "MAX_ENVELOPE_BYTES", "int", "1024 * 1024", "1048575"): _TESTED_BOUND,
    ("dsse", "MAX_SIGNATURES", "int", "32", "33"): _TESTED_BOUND,
    ("dsse", "MAX_SIGNATURES", "int", "32", "31"): _TESTED_BOUND,
    (
        "dsse",
        "decode_envelope",
        "raise",
        'raise MalformedEnvelopeError("not a DSSE envelope: nested too deep") from exc',
        "pass",
    ): (
        "equivalent while Envelope and Signature forbid unknown fields (their flags' "
        "mutants are killed): the typed decode refuses the first value of the wrong shape "
        "or the first unknown field with a ValidationError and never recurses, so no "
        "input reaches this handler (tests/unit/test_dsse.py nests 100 000 deep at each "
        "place); msgspec only recurses when it skips an unknown field's value"
    ),
    (
        "passkeys",
        "open_grant",
        "cmp",
        "0 < lifetime <= MAX_GRANT_MS",
        "0 <= lifetime <= MAX_GRANT_MS",
    ): (_GRANT_TIME_CHECKED),
    ("passkeys", "open_grant", "int", "0", "-1"): _GRANT_TIME_CHECKED,
    (
        "passkeys",
        "_verify_assertion",
        "int",
        "credential_current_sign_count=0",
        "credential_current_sign_count=-1",
    ): (
        "equivalent: the verifier compares the assertion's counter with the current one only "
        "when either is above zero, and then refuses a counter at or below it; no counter is "
        "below zero, so 0 and -1 are refused and accepted alike (no counter is kept)"
    ),
    (
        "passkeys",
        "_verify_assertion",
        "bool",
        "require_user_verification=True",
        "require_user_verification=False",
    ): (
        "equivalent: user verification is checked first, from the same authenticator data, "
        "with its own code (passkey_user_not_verified, tested), so no assertion without it "
        "reaches the verifier; the verifier's own check is kept as a second wall"
    ),
    ("dsse", "b64decode", "if-true", "uses_url_safe", "True"): (
        "equivalent: translating '-_' to '+/' in a text that holds neither is the identity"
    ),
    ("dsse", "_Decoded", "bool", "frozen=True", "frozen=False"): (
        "equivalent: an internal value built and read inside dsse only; nothing assigns to it"
    ),
    (
        "dsse",
        "verify",
        "drop-operand",
        "key_id not in accepted and key.verify(message, signature)",
        "key.verify(message, signature)",
    ): (
        "equivalent: a key already accepted is verified again and added to the set again "
        "(a no-op); only work, bounded by MAX_SIGNATURES, changes"
    ),
    (
        "approvals",
        "ApprovalResolution.__post_init__",
        "drop-operand",
        "self.deny_reason is not None or self.note is not None",
        "self.deny_reason is not None",
    ): (
        "equivalent: a note without a deny reason is refused by the next check (a note "
        "comes with a closed deny reason) whatever the decision, and a note with a reason "
        "on an allow-once is still refused here for its reason"
    ),
    (
        "approvals",
        "open_outcome",
        "drop-operand",
        "verdict.decision_id is None or approval_id_for(verdict.decision_id) != approval_id",
        "approval_id_for(verdict.decision_id) != approval_id",
    ): (
        "equivalent: approval_id_for(None) is the identity of {'approval_for': null}, never "
        "an approval id derived from a decision, so an outcome without a decision id is "
        "refused by the same check with the same error"
    ),
    ("tool_calls", "MAX_CALLS_BYTES", "int", "64 * 1024", "65537"): _RESOURCE_BOUND,
    ("tool_calls", "MAX_CALLS_BYTES", "int", "64 * 1024", "65535"): _RESOURCE_BOUND,
    ("tool_calls", "DecidedCalls", "int", "8192", "8193"): _DECIDED_INDEX,
    ("tool_calls", "DecidedCalls", "int", "8192", "8191"): _DECIDED_INDEX,
    ("tool_calls", "DecidedCalls", "int", "1024", "1025"): _DECIDED_INDEX,
    ("tool_calls", "DecidedCalls", "int", "1024", "1023"): _DECIDED_INDEX,
    ("tool_calls", "ToolCallDesk", "bool", "frozen=True", "frozen=False"): (
        "harmless: the desk is wiring the assembly builds once and nothing assigns to; it "
        "holds no checked value (its state, the decided calls and the stops, is mutable "
        "by design inside the objects it refers to)"
    ),
    ("tool_calls", "ToolCallDesk.handle_calls", "if-true", "i in reasons", "True"): (
        "equivalent: this branch runs only when nothing is uncovered, that is when every "
        "id not covered is in reasons"
    ),
    ("release", "MAX_BUNDLE_BYTES", "int", "900 * 1024", "921601"): (
        _TESTED_BOUND + "; both values stay below the NATS 1 MiB max_payload"
    ),
    ("release", "MAX_BUNDLE_BYTES", "int", "900 * 1024", "921599"): _TESTED_BOUND,
    ("release", "MAX_TRUST_ROOT_KEYS", "int", "16", "17"): _RESOURCE_BOUND,
    ("release", "MAX_TRUST_ROOT_KEYS", "int", "16", "15"): _RESOURCE_BOUND,
    ("release", "MAX_REVOCATIONS", "int", "1024", "1025"): _RESOURCE_BOUND,
    ("release", "MAX_REVOCATIONS", "int", "1024", "1023"): _RESOURCE_BOUND,
    ("release", "SequenceNumber", "int", "le=2**53 - 1", "le=9007199254740992"): (
        "equivalent: a sequence is only read from a signed canonical manifest, and "
        "canonical_bytes refuses 2**53 (tests/unit/test_release_trust.py, the 'unsafe' case)"
    ),
    ("model_admission", "ModelAdmissionDesk", "bool", "frozen=True", "frozen=False"): (
        "harmless: the desk is wiring the assembly builds once and nothing assigns to; it "
        "holds no checked value (the attestations and confinements it reads are mutable by "
        "design inside the desks it refers to)"
    ),
    (
        "model_admission",
        "ModelAdmissionDesk.handle",
        "drop-operand",
        "reason is None and held is not None and not ask.model_list",
        "reason is None and (not ask.model_list)",
    ): _STANDING_HOLDS,
    (
        "model_admission",
        "ModelAdmissionDesk.handle",
        "drop-operand",
        "reason is None and held is not None",
        "reason is None",
    ): _STANDING_HOLDS,
    (
        "model_admission",
        "ModelAdmissionDesk.handle",
        "drop-operand",
        'reason or "runtime_attestation_missing"',
        "reason",
    ): _STANDING_HOLDS,
    (
        "model_admission",
        "ModelAdmissionDesk.handle",
        "drop-operand",
        "reason is None and instance_id is not None and ask.proof_seen is True",
        "instance_id is not None and ask.proof_seen is True",
    ): (
        "equivalent: AttestationDesk.admit_instance names the process it proved only with "
        "no refusal (every refusing return is (reason, None, None)), so a named process "
        "already means no reason"
    ),
    ("model_admission", "ModelAdmissionDesk.handle", "if-false", "window is None", "False"): (
        "equivalent: this runs only when _egress found no reason, and _egress returns no "
        "reason only with the release's window, so the window is never None here"
    ),
    (
        "gateway_admission",
        "ModelGateway._admit",
        "cmp",
        "now < cached.valid_until_ms",
        "now <= cached.valid_until_ms",
    ): (
        "harmless: a kept admission of a proof serves one millisecond more, at its end; "
        "that end is the gate's lease or the proof's (their checks compare with a strict "
        "'>', so the gate admits at that millisecond too) or the gateway's own cache bound "
        "(the path without a proof is tested at its end)"
    ),
    (
        "gateway_admission",
        "ModelGateway._admit",
        "cmp",
        "v.valid_until_ms <= now",
        "v.valid_until_ms < now",
    ): _SWEEP_ONLY,
    ("gateway_admission", "ModelGateway._admit", "if-false", "v.valid_until_ms <= now", "False"): (
        _SWEEP_ONLY
    ),
    ("gateway_admission", "ModelGateway._admit", "int", "16", "17"): _QUESTION_ID,
    ("gateway_admission", "ModelGateway._admit", "int", "16", "15"): _QUESTION_ID,
    ("bus_access", "ConnectOptions", "bool", "total=False", "total=True"): (
        "equivalent at run time: a TypedDict's totality is read by the type checker alone "
        "(mypy --strict, run by make test, refuses total=True: connect_options returns "
        "the credential's keys without TLS, or TLS without a credential)"
    ),
    ("bus_access", "read_credential", "int", "1", "2"): (
        "equivalent: reading one byte past the bound is what tells an over-long file; two "
        "bytes past tells it as well (the bound's edge is tested with literal sizes)"
    ),
}
"""Survivors reviewed as equivalent (or harmless), keyed by :attr:`Mutant.key`, with
why. The report marks them; any survivor not listed here fails the run."""
