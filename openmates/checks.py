"""System checks (filled in with the foundation)."""
