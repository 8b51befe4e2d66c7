"""One module per command group of ``smf-assurance``."""
