"""The msgspec messages a contract module defines, found by walking it: a test over
"every message" then covers a message added later without a hand list."""

from __future__ import annotations

from types import ModuleType

import msgspec


def structs_defined_in(module: ModuleType) -> list[type[msgspec.Struct]]:
    """Every ``msgspec.Struct`` class defined in ``module`` (not imported into it)."""
    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, msgspec.Struct)
        and obj.__module__ == module.__name__
    ]
