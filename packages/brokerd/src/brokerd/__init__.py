"""brokerd."""
