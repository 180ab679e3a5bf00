"""bxctl."""
