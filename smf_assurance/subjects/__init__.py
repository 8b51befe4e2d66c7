"""The bus contract of SMF Assurance Gate.

Subject and header names, wire message Structs, canonical JSON, hashes and
keyed identifiers. This package imports nothing else of ours
(ARCHITECTURE.md, "Layers of the code"), so runtime adapters can depend on it
alone.
"""
