"""Fixtures of the consult tests."""

from support.egress import egress_proxies  # noqa: F401 (a fixture for the tests here)
