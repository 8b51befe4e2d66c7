"""One immutable candidate: claims bound to tests, a commit and signed reviews.

A row of evidence closes only when implementation, regression, conformance,
independent review and one commit all name the same candidate
(ARCHITECTURE.md, "Claims we must not make").
"""
