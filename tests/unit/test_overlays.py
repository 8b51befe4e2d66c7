"""Signed customer overlays (smf_assurance/governance/overlays.py) and why they cannot weaken the
floor.

A customer overlay is signed by the customer's key, versioned, bound
to one tenant, and cannot weaken the safety floor; "the compiler and the
evaluator both refuse; tests prove both". Proves:

- the compiler takes a valid overlay's policies into the enforcement
  projection, and refuses (writing nothing) an overlay that is unsigned,
  signed by someone else, below the customer's threshold, stale, for another
  tenant, above the customer layer, missing, undeclared, or less severe than
  the floor on the same rule;
- the evaluator's monotonic merge makes weakening ineffective even where the
  compiler cannot see it: an overlay ``allow`` on another rule that matches the
  same operation compiles, and the floor still denies; and a customer
  ``allow`` on the floor's own rule, put into a policy set directly, still
  loses to the floor's ``deny``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.projection import PolicyRecord, build_policy_set
from smf_assurance.governance.compiler import CompileError, compile_corpus
from smf_assurance.governance.overlays import (
    OVERLAY_SCHEMA,
    CustomerOverlay,
    overlay_path,
    sign_overlay,
)
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.ops.cli.main import main
from smf_assurance.subjects.keys import SigningKey, public_record
from tests.support.builders import (
    AT_MS,
    make_envelope,
    make_policy,
    make_rule,
    policy_set_from,
)

TENANT = "tenant-acme"
CUSTOMER = SigningKey.from_seed(b"\x21" * 32)
CUSTOMER_2 = SigningKey.from_seed(b"\x22" * 32)
STRANGER = SigningKey.from_seed(b"\x23" * 32)
HOLD_RULE = "urn:smf:rule:scenario:legal-hold-preservation"
DELETE_UNDER_HOLD: dict[str, Any] = {
    "capability": "document.delete",
    "effects.persistence": "external_persistent",
    "effects.reversibility": "none",
    "workflow.legal_hold": True,
}
EXTRA_RULE = make_rule(
    "scenario:acme-any-deletion",
    {"eq": {"fact": "capability", "value": "document.delete"}},
    statement="Acme's own rule about any deletion (synthetic, for tests).",
)


def policy(policy_id: str, rule_id: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("layer", "customer")
    fields.setdefault("effect", "conditional")
    return make_policy(policy_id, rule_id, **fields)


def overlay(*policies: dict[str, Any], tenant: str = TENANT, version: int = 1) -> CustomerOverlay:
    return CustomerOverlay(
        schema=OVERLAY_SCHEMA,
        tenant_id=tenant,
        version=version,
        policies=tuple(msgspec.convert(p, PolicyRecord) for p in policies),
    )


TIGHTER = policy(
    "acme.overlay.two-attorneys",
    "urn:smf:rule:scenario:attorney-approval-transmission",
    requirements={"approval_count": 2, "required_roles": ["licensed_attorney", "partner"]},
)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """The shipped scenario corpus plus one extra synthetic rule, declaring Acme as a customer."""
    folder = tmp_path / "corpus"
    shutil.copytree(package_path(SCENARIO_CORPUS), folder)
    rules = json.loads((folder / "rules.json").read_text())
    (folder / "rules.json").write_text(json.dumps([*rules, EXTRA_RULE]))
    declare(folder)
    return folder


def declare(
    folder: Path,
    *,
    keys: tuple[SigningKey, ...] = (CUSTOMER,),
    threshold: int = 1,
    version: int = 1,
    tenants: tuple[str, ...] = (TENANT,),
) -> None:
    customers = [
        {
            "tenant_id": tenant,
            "overlay_version": version,
            "threshold": threshold,
            "keys": [
                msgspec.to_builtins(public_record(k, f"{tenant}-{n}")) for n, k in enumerate(keys)
            ],
        }
        for tenant in tenants
    ]
    (folder / "customers.json").write_text(
        json.dumps({"schema": "smf.customers/1", "customers": customers})
    )


def place(
    folder: Path,
    value: CustomerOverlay,
    signers: tuple[SigningKey, ...] = (CUSTOMER,),
    tenant: str = TENANT,
) -> None:
    path = overlay_path(folder, tenant)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sign_overlay(value, list(signers)))


def refused(folder: Path, needle: str) -> None:
    with pytest.raises(CompileError, match=needle):
        compile_corpus(folder)


# --- a valid overlay -----------------------------------------------------------------------


def test_a_signed_overlay_adds_its_policies(corpus: Path) -> None:
    place(corpus, overlay(TIGHTER))
    compiled = compile_corpus(corpus)
    ids = [p.policy_id for p in compiled.enforcement.policies]
    assert "acme.overlay.two-attorneys" in ids


def test_an_overlay_can_only_tighten_the_merged_requirements(corpus: Path) -> None:
    place(corpus, overlay(TIGHTER))
    policy_set = build_policy_set(compile_corpus(corpus).enforcement)
    envelope = make_envelope(
        {
            "capability": "external.transmit",
            "effects.egress": True,
            "destination.channel": "email",
            "destination.locality": "external",
        }
    )
    decision = evaluate(envelope, policy_set, at_ms=AT_MS)
    assert decision.disposition == "conditional"
    assert decision.requirements.approval_count == 2
    assert set(decision.requirements.required_roles) == {"licensed_attorney", "partner"}
    assert decision.requirements.exact_action_binding is True  # the floor's, kept


def test_a_corpus_without_customers_has_no_overlays(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    shutil.copytree(package_path(SCENARIO_CORPUS), folder)
    assert (
        compile_corpus(folder).enforcement
        == compile_corpus(package_path(SCENARIO_CORPUS)).enforcement
    )


def test_a_customer_threshold_of_two_needs_two_customer_keys(corpus: Path) -> None:
    declare(corpus, keys=(CUSTOMER, CUSTOMER_2), threshold=2)
    place(corpus, overlay(TIGHTER), signers=(CUSTOMER,))
    refused(corpus, "BelowThreshold")
    place_again(corpus, overlay(TIGHTER), (CUSTOMER, CUSTOMER_2))
    compile_corpus(corpus)


def place_again(folder: Path, value: CustomerOverlay, signers: tuple[SigningKey, ...]) -> None:
    overlay_path(folder, TENANT).unlink()
    place(folder, value, signers)


# --- the compiler refuses ---------------------------------------------------------------------


def test_an_overlay_signed_by_someone_else_is_refused(corpus: Path) -> None:
    place(corpus, overlay(TIGHTER), signers=(STRANGER,))
    refused(corpus, "UnknownSigner")


def test_an_unsigned_or_altered_overlay_is_refused(corpus: Path) -> None:
    place(corpus, overlay(TIGHTER))
    path = overlay_path(corpus, TENANT)
    envelope = json.loads(path.read_text())
    envelope["payload"] = envelope["payload"][:-8] + "AAAAAAA="
    path.write_text(json.dumps(envelope))
    refused(corpus, "overlay of tenant-acme")
    path.write_text("{not json")
    refused(corpus, "overlay of tenant-acme")


def test_a_stale_overlay_version_is_refused(corpus: Path) -> None:
    declare(corpus, version=2)
    place(corpus, overlay(TIGHTER, version=1))
    refused(corpus, "version 1; the corpus pins version 2")


def test_an_overlay_for_another_tenant_is_refused(corpus: Path) -> None:
    place(corpus, overlay(TIGHTER, tenant="tenant-globex"))
    refused(corpus, "names tenant tenant-globex")


def test_an_overlay_policy_scoped_to_another_tenant_is_refused(corpus: Path) -> None:
    place(corpus, overlay({**TIGHTER, "scope": {"tenant_id": "tenant-globex"}}))
    refused(corpus, "scoped to tenant tenant-globex")


@pytest.mark.parametrize("layer", ["smf_safety_floor", "binding_authority"])
def test_an_overlay_cannot_write_above_the_customer_layer(corpus: Path, layer: str) -> None:
    place(
        corpus,
        overlay(
            policy("acme.floor", HOLD_RULE, layer=layer, effect="deny", scope={"tenant_id": TENANT})
        ),
    )
    refused(corpus, f"is in layer {layer}")


def test_a_declared_customer_without_its_overlay_is_refused(corpus: Path) -> None:
    refused(corpus, "has no readable overlay")


def test_an_overlay_without_a_declared_customer_is_refused(corpus: Path) -> None:
    place(corpus, overlay(TIGHTER))
    (corpus / "customers.json").unlink()
    refused(corpus, "undeclared customer: tenant-acme")


def test_a_malformed_customer_declaration_is_refused(corpus: Path) -> None:
    (corpus / "customers.json").write_text('{"schema":"smf.customers/1","customers":[{}]}')
    refused(corpus, "customers.json")
    declare(corpus, tenants=(TENANT, TENANT))
    refused(corpus, "declared twice")
    declare(corpus, keys=(CUSTOMER,), threshold=2)
    place(corpus, overlay(TIGHTER))
    refused(corpus, "exceeds its 1 distinct keys")


def test_a_customer_key_under_a_false_id_is_refused(corpus: Path) -> None:
    record = msgspec.to_builtins(public_record(CUSTOMER, "acme"))
    record["key_id"] = CUSTOMER_2.key_id
    (corpus / "customers.json").write_text(
        json.dumps(
            {
                "schema": "smf.customers/1",
                "customers": [{"tenant_id": TENANT, "overlay_version": 1, "keys": [record]}],
            }
        )
    )
    place(corpus, overlay(TIGHTER))
    refused(corpus, "does not match")


@pytest.mark.parametrize("effect", ["allow", "conditional"])
def test_the_compiler_refuses_an_overlay_weaker_than_the_floor_on_its_rule(
    corpus: Path, effect: str
) -> None:
    """The floor denies deletion under legal hold; a customer allow (or a mere
    approval) on that same rule is an attempt to weaken it."""
    place(
        corpus,
        overlay(
            policy(
                "acme.hold-ok",
                HOLD_RULE,
                effect=effect,
                requirements=(
                    {"approval_count": 1, "required_roles": ["licensed_attorney"]}
                    if effect == "conditional"
                    else None
                ),
            )
        ),
    )
    refused(corpus, "would .* what the floor restricts")


def test_nothing_is_written_when_an_overlay_is_refused(corpus: Path, tmp_path: Path) -> None:
    place(corpus, overlay(policy("acme.hold-ok", HOLD_RULE, effect="allow")))
    out = tmp_path / "out"
    assert main(["compile", "--corpus", str(corpus), "--out", str(out)]) == 1
    assert not out.exists() or not any(out.iterdir())


# --- the evaluator makes weakening ineffective ---------------------------------------------------


def test_an_overlay_allow_on_another_matching_rule_cannot_relax_the_floor(corpus: Path) -> None:
    """The compiler cannot see that two rules match the same operation; the
    monotonic merge makes it harmless: deny dominates."""
    place(corpus, overlay(policy("acme.delete-anything", EXTRA_RULE["rule_id"], effect="allow")))
    policy_set = build_policy_set(compile_corpus(corpus).enforcement)
    decision = evaluate(make_envelope(DELETE_UNDER_HOLD), policy_set, at_ms=AT_MS)
    assert decision.disposition == "deny"
    assert "legal_hold_blocks_deletion" in decision.reason_codes
    assert "acme.delete-anything" in [p.policy_id for p in decision.applied_policies]


def test_a_customer_allow_on_the_floors_own_rule_still_loses(corpus: Path) -> None:
    """Bypassing the compiler entirely (policies put into a policy set directly):
    the evaluator still denies."""
    rules = json.loads((corpus / "rules.json").read_text())
    policies = [
        make_policy(
            "floor.hold", HOLD_RULE, layer="smf_safety_floor", effect="deny", reason_code="held"
        ),
        policy("acme.hold-ok", HOLD_RULE, effect="allow", reason_code="customer_says_ok"),
        policy("acme.user-ok", HOLD_RULE, layer="user", effect="allow", reason_code="user_says_ok"),
    ]
    decision = evaluate(
        make_envelope(DELETE_UNDER_HOLD), policy_set_from(rules, policies), at_ms=AT_MS
    )
    assert decision.disposition == "deny"
    assert decision.reason_codes[0] == "held"
