"""Per-adapter mapper tables (data files): native tool -> operation envelope."""
