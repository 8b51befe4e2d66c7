"""The shipped scenario envelopes and the outcome each must have."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from smf_assurance.governance.projections import SCENARIO_ENVELOPES, package_path
from smf_assurance.subjects.envelope import OperationEnvelope, decode_envelope


class Expected(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    disposition: str
    reason: str


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    envelope: OperationEnvelope
    expected: Expected


def load_scenarios() -> list[Scenario]:
    folder = Path(package_path(SCENARIO_ENVELOPES))
    expected = msgspec.json.decode(
        (folder / "expected.json").read_bytes(), type=dict[str, Expected]
    )
    return [
        Scenario(name, decode_envelope((folder / f"{name}.json").read_bytes()), outcome)
        for name, outcome in sorted(expected.items())
    ]
