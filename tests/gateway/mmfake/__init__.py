"""A fake Mattermost server for gatewayd's tests: REST and WebSocket, validated against the
spec subset and frame schema in ../shared/reference/mattermost/ (Mattermost cannot run here)."""

from .app import FakeMattermost
from .server import serve
from .spec import REFERENCE, SpecChecker

__all__ = ["REFERENCE", "FakeMattermost", "SpecChecker", "serve"]
