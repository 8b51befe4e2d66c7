"""The fixtures, builders and constants of tests/cli/test_cli_model_gateway.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import msgspec

from tests.support.model_gateway import ACTOR as MODEL_ACTOR

__all__ = ["ACTOR"]

ACTOR = msgspec.to_builtins(MODEL_ACTOR)
