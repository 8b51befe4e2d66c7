"""Swarm: provenance-grounded legal analysis from the analysis projection.

Scenario 4 of ARCHITECTURE.md: personas write claims about a matter, and a
report may carry as rule-backed only claims that cite rules *selected* from
the governed release. Reading order:

- ``selector``: every rule is selected, unresolved or excluded, with reasons,
  using the gate's fact registry and predicate language.
- ``claims``: persona answers read without dropping fields; the validator
  that rejects invented, excluded, unresolved and foreign citations.
- ``personas``: the persona interface, the deterministic offline set and an
  OpenAI-compatible chat-completions client.
- ``report``: the report (JSON and Markdown) and the signed faithfulness
  review.
- ``service``: ``smf.swarm.analyze`` on NATS, and ``analyze`` in-process.

Swarm may import ``subjects`` and ``smf_assurance.core``, and ``service`` the
``smf_assurance.pipeline.service`` helper; it never imports ``ops``, the gate's
stages or stores, and the gate never imports Swarm. Rule-id validation stops
invented citations; it does not prove that each sentence follows from the
rule it cites (docs/SWARM.md).
"""
