"""Where the command line finds projections: a directory, or the shipped scenario set."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from smf_assurance.core.projection import (
    PolicySet,
    ProjectionError,
    build_policy_set,
    decode_enforcement,
)

SCENARIO_CORPUS = "corpus/scenarios"
SCENARIO_PROJECTION = "corpus/scenarios.compiled"
SCENARIO_ENVELOPES = "scenarios"


def package_path(relative: str) -> Path:
    """A folder shipped inside the ``ops`` package (wheel or source tree)."""
    return Path(str(resources.files("smf_assurance.governance").joinpath(relative)))


def load_policy_set(directory: Path | None = None) -> PolicySet:
    """Load and compile an enforcement projection; the shipped scenarios by default."""
    folder = directory if directory is not None else package_path(SCENARIO_PROJECTION)
    path = folder / "enforcement.json"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProjectionError(f"cannot read {path}: {exc.strerror}") from exc
    return build_policy_set(decode_enforcement(data))
