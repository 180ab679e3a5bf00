"""gatewayd."""
