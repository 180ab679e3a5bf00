"""consult for real against the local llama-server standing in for the cloud: it speaks the
same OpenAI-compatible API. The server listens on a Unix socket in a temp dir; a loopback TCP
front on an ephemeral port lets the egress proxy reach it, as it would reach a hosted
endpoint."""

from __future__ import annotations

import asyncio

import pytest
from brokerd.egresslog import CONSULT
from bxcore.tools import ToolRequest
from support.egresslog import read_egress_log
from support.llama import SMOL, start_single

from .support import consult_section, grant_text, make_rig, no_approval_wait, tcp_front

pytestmark = [pytest.mark.real_server, pytest.mark.sandbox]

LLAMA = "llama.consult.test"


def test_a_real_openai_compatible_server_answers_through_the_sandbox(tmp_path):
    with start_single(SMOL) as server:

        async def main():
            async with tcp_front(server.socket) as port:
                endpoint = f"http://{LLAMA}:{port}/v1/chat/completions"
                section = consult_section(endpoint, api_key=None, max_tokens=24,
                                          liveness_timeout=60.0)
                rig = make_rig(tmp_path, section, host=LLAMA)
                rig.grant(grant_text(f"{LLAMA}:{port}", secrets_=()))
                request = ToolRequest(session="s-real", call=1, tool=CONSULT,
                                      arguments='{"question": "Name one colour."}')
                return rig, await rig.broker.call(request, no_approval_wait)

        rig, response = asyncio.run(main())
    assert response.status == "ok", response.content
    assert response.content.strip()
    assert response.untrusted is True
    (record,) = read_egress_log(rig.egress.path)
    assert record.arguments == {"question": "Name one colour."}
    assert (record.model, record.temperature, record.max_tokens) == ("cloud-model", 0.6, 24)
