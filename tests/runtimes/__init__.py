"""The Hermes and OpenClaw adapters, the real runtimes, and their confinement
(bubblewrap, network namespaces)."""
