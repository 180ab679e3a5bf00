"""loopd."""
