"""The Hermes Agent adapter: a block-only plugin that asks the SMF gate.

``smf_assurance.adapters.hermes.plugin`` is the ``hermes_agent.plugins`` entry point; see
docs/HERMES.md for installation, configuration and the known holes.
"""
