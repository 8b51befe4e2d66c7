"""Async NATS services: thin shells around the pure core (ARCHITECTURE.md, "Layers")."""
