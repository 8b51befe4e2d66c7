"""The gate's composition root: a running gate from explicit settings.

ARCHITECTURE.md, "Layers of the code" (assembly). ``start_gate(GateConfig)``
opens the stores, builds the stages and the chain, starts every service and
background loop, and returns a ``RunningGate``. Everything it needs is in the
config: bus servers, keys, registry, store paths, the policy source; it
reads no state directory and runs no demo code, so a gate starts from
``pipeline`` alone. Operations (``ops/``) build a config from a
state directory; tests build one the same way or by hand.
"""

from smf_assurance.pipeline.assembly.config import (
    ClusterSettings,
    GateConfig,
    ReleaseSource,
    StorePaths,
    shipped_mapper_tables,
)
from smf_assurance.pipeline.assembly.gate import RunningGate, start_gate
from smf_assurance.pipeline.service import BusUnavailableError

__all__ = [
    "BusUnavailableError",
    "ClusterSettings",
    "GateConfig",
    "ReleaseSource",
    "RunningGate",
    "StorePaths",
    "shipped_mapper_tables",
    "start_gate",
]
