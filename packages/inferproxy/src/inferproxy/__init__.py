"""inferproxy."""
