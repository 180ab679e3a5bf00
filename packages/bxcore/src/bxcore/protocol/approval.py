"""Approvals: brokerd asks the owner, through a channel, whether an ``ask`` call may run.

``gateway.sock`` (served by gatewayd) and ``approve.sock`` (served by brokerd for local
``bxctl approve``/``deny``) carry these frames.

On gateway.sock brokerd connects once per approval, sends ``approval_request`` and waits on the
same connection for one ``approval_answer`` (final). brokerd closes the connection when the
approval expires; expiry means deny.

Also on gateway.sock a local client (a scheduled job's run) sends ``owner_notice``: gatewayd posts
its text in the session's thread, which for a session that did not start in Mattermost is a DM
thread of its own with the owner (the same thread its approvals are posted in), and answers
``notice_posted`` (final).

On approve.sock bxctl sends ``approval_list`` (answered by ``approval_pending``, final) or
``approval_answer`` (answered by ``approval_ack`` or ``error``, final).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .._base import Model, Text
from ..errors import WireError
from ..frames import ERROR as ERROR  # re-exported: each protocol names its error kind
from ..frames import kind_table
from ..ids import SessionId

APPROVAL_REQUEST = "approval_request"
APPROVAL_ANSWER = "approval_answer"
APPROVAL_LIST = "approval_list"
APPROVAL_PENDING = "approval_pending"
APPROVAL_ACK = "approval_ack"
OWNER_NOTICE = "owner_notice"
NOTICE_POSTED = "notice_posted"



class ApprovalRequest(Model):
    """What exactly will run, for the owner to judge. ``id`` is unguessable and bound to this
    one call (tool and argument hash); it can be answered once."""

    id: Text
    session: SessionId
    tool: Text
    arguments: Text  # the JSON text of the call's arguments, shown to the owner verbatim
    arguments_sha256: Text
    grant: Text  # the grant file whose mode is ``ask``
    expires: Text  # RFC 3339


class ApprovalAnswer(Model):
    id: Text
    verdict: Literal["approve", "deny"]
    by: Text  # who answered: a Mattermost user id, or "local:<uid>" for bxctl


class ApprovalPending(Model):
    approvals: list[ApprovalRequest]


class ApprovalAck(Model):
    id: Text
    verdict: Literal["approve", "deny"]


class OwnerNotice(Model):
    """Something the owner should read, for the thread of ``session`` (e.g. a job's answer)."""

    session: SessionId
    text: Annotated[Text, Field(min_length=1, max_length=64 * 1024)]


class NoticePosted(Model):
    root_id: Text  # the thread it was posted in
    post_id: Text  # its first post


class ApprovalList(Model):
    """``approval_list``'s body: nothing (every pending call is listed)."""


# What each side sends, with each kind's body (bxcore.frames.Kinds).
TO_GATEWAYD = kind_table({APPROVAL_REQUEST: ApprovalRequest, OWNER_NOTICE: OwnerNotice})
FROM_GATEWAYD = kind_table({APPROVAL_ANSWER: ApprovalAnswer, NOTICE_POSTED: NoticePosted,
                            ERROR: WireError})
TO_APPROVE_SOCKET = kind_table({APPROVAL_LIST: ApprovalList, APPROVAL_ANSWER: ApprovalAnswer})
FROM_APPROVE_SOCKET = kind_table({APPROVAL_PENDING: ApprovalPending, APPROVAL_ACK: ApprovalAck,
                                  ERROR: WireError})
