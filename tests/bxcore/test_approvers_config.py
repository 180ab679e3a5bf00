"""``[broker] approvers``: each entry is ``local:<uid>``, ``local:socket`` or a Mattermost user
id; anything else is a ConfigError naming the file, the key and the entry."""

from __future__ import annotations

import pytest
from bxcore.config import parse_config
from bxcore.errors import ConfigError

MM = "8xq3mattermostuserid0000aa"


def approvers(entries: str) -> list[str]:
    return parse_config(f"[broker]\napprovers = {entries}\n", "config.toml").broker.approvers


def test_the_three_kinds_of_entry_are_taken():
    entries = ["local:1000", "local:0", "local:socket", MM]
    assert approvers(str(entries).replace("'", '"')) == entries


@pytest.mark.parametrize(
    "entry",
    [
        "local:bob",  # a user name, not a uid
        "local:-1",
        "local:",
        "local:socket ",
        "Local:socket",
        "local:1000(uid 1000)",
        "local:socket(uid 65534)",  # what brokerd records, not what the owner lists
        "8XQ3MATTERMOSTUSERID0000AA",  # Mattermost ids are lowercase
        "8xq3mattermostuserid0000a",  # 25 characters
        "mm-owner-id",
        "",
    ],
)
def test_a_bad_entry_names_the_file_the_key_and_the_entry(entry):
    with pytest.raises(ConfigError) as refused:
        approvers(f'["local:1000", "{entry}"]')
    message = str(refused.value)
    assert message.startswith("config.toml: broker.approvers.1: not an approver")
    assert repr(entry) in message and '"local:socket"' in message


def test_an_entry_that_is_not_text_is_refused():
    with pytest.raises(ConfigError, match=r"config.toml: broker.approvers.0: .*string"):
        approvers("[1000]")
