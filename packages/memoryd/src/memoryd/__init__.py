"""memoryd."""
