"""Fixtures for gatewayd's tests: a fake Mattermost whose spec violations fail the test."""

from __future__ import annotations

import pytest

from .mmfake import FakeMattermost, SpecChecker

_SPEC = SpecChecker()


@pytest.fixture
def fake():
    server = FakeMattermost(_SPEC)
    yield server
    assert server.violations == [], "the fake or gatewayd broke the Mattermost spec subset"
