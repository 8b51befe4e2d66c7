"""SMF Assurance Gate: one namespace for every distribution we ship.

The Hermes adapter installs into Hermes's own environment, which
ships generic top-level modules (``agent``, ``tools``, ``plugins``, ...), so
none of our packages may sit at the top level there. Every package of ours
lives under ``smf_assurance``: the gate (``smf-assurance``) ships all of them,
the Hermes adapter distribution only ``smf_assurance.subjects`` and the
adapter itself.
"""
