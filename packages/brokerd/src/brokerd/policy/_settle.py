"""What an ``ask`` Decision becomes once the owner has answered (or failed to in time)."""

from __future__ import annotations

from ._decision import Decision, redeem


def settle(asked: Decision, *, approved: bool, reason: str) -> Decision:
    """Use up a genuine, unused ``ask`` Decision: an allowing Decision with the spec its grant
    allows when ``approved``, else a denial. Raises NotAuthorized for anything else."""
    record = asked.record.model_copy(update={
        "verdict": "allow" if approved else "deny",
        "reason": reason,
    })
    return redeem(asked, record)
