"""Identifiers that end up in file paths, validated so they can never escape their directory."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_session_id(value: str) -> str:
    """A session id is 1-64 characters of ``A-Za-z0-9_-``, not starting with ``-`` or ``_``.

    It names a directory under sessions/, so ``..``, ``/``, empty and over-long ids are refused.
    """
    if not isinstance(value, str) or not _SESSION_ID.fullmatch(value):
        raise ValueError(
            "a session id is 1-64 characters of letters, digits, '-' and '_', "
            f"starting with a letter or digit; got {value!r}"
        )
    return value


def is_session_id(value: str) -> bool:
    """Whether a directory name under sessions/ is a session's (a staging directory is not)."""
    return bool(_SESSION_ID.fullmatch(value))


SessionId = Annotated[str, AfterValidator(check_session_id)]

_ORIGIN = re.compile(r"[a-z][a-z0-9_-]{0,31}:[A-Za-z0-9._:-]{1,95}")


def check_origin(value: str) -> str:
    """A turn's origin, its idempotency key: ``<channel>:<id>``, e.g. ``mattermost:<post_id>``.

    The channel is 1-32 characters of ``a-z0-9_-`` starting with a letter; the id 1-95 of
    ``A-Za-z0-9._:-``; at most 128 in all. It is written to the session log, never to a prompt.
    """
    if not isinstance(value, str) or not _ORIGIN.fullmatch(value):
        raise ValueError(
            "an origin is '<channel>:<id>': a channel of 1-32 lowercase letters, digits, '-' "
            "and '_' starting with a letter, then an id of 1-95 letters, digits and '._:-'; "
            f"got {value!r}"
        )
    return value


Origin = Annotated[str, AfterValidator(check_origin)]


def new_session_id(now: datetime | None = None) -> str:
    """A fresh id from the time and a random suffix, e.g. ``20261130-074512-3f9a1c2b``."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{moment:%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"
