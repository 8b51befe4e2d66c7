"""Tests with no server and no subprocess runtime: pure core, subjects, vectors,
properties and the repository's own fitness rules."""
