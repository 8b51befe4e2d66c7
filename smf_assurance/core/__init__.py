"""The decision core: pure and synchronous, no I/O, no awaits.

ARCHITECTURE.md, "Layers of the code": the core never awaits and never
touches a socket or a file, so the decision logic is tested without a bus.
"""
