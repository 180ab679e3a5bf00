"""[inferproxy] and [inference]: the path from loopd to the llama-server router."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from ._common import ConfigPath, Seconds, Section, SocketMode


class InferproxySection(Section):
    """inferproxy: one Unix socket in, one fixed upstream out."""

    socket: ConfigPath | None = None  # infer.sock, for loopd too; default: <paths.run>/infer.sock
    mode: SocketMode = 0o660
    group: str | None = None  # the group allowed to connect (loopd's)
    # tcp://host:port or unix:/path/to/llama.sock
    upstream: str = "tcp://127.0.0.1:8080"
    watchdog: bool = False  # send WATCHDOG=1 when systemd asks for it

    @field_validator("upstream")
    @classmethod
    def _check_upstream(cls, value: str) -> str:
        if value.startswith("unix:") and len(value) > len("unix:"):
            return value
        if value.startswith("tcp://"):
            host, sep, port = value[len("tcp://") :].rpartition(":")
            if sep and host and port.isdigit() and 0 < int(port) < 65536:
                return value
        raise ValueError("expected tcp://HOST:PORT or unix:/PATH")


class SlotSection(Section):
    """Slot assignment is configuration: a session's kind picks its slot, for good."""

    main: Annotated[int, Field(ge=0)] = 0
    background: Annotated[int, Field(ge=0)] = 1


# llama-server's --cache-type-k / --cache-type-v values (ggml's KV cache types)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def _kv_cache_type(value: str) -> str:
    """"q8_0" (keys and values alike) or "q8_0/f16" (keys/values), kept as "<k>/<v>"."""
    parts = value.split("/")
    if len(parts) not in (1, 2) or any(part not in KV_CACHE_TYPES for part in parts):
        raise ValueError(
            f'expected a KV cache type such as "q8_0" (keys and values alike) or "q8_0/f16" '
            f"(keys/values), each one of {', '.join(KV_CACHE_TYPES)}, as llama-server's "
            f"--cache-type-k and --cache-type-v take them")
    return f"{parts[0]}/{parts[-1]}"


class ServingSection(Section):
    """Serving settings the owner's host is expected to run with (recorded, not owned).

    The startup self-test compares them with /props, /slots and the router's /models. A key left
    out is not checked.
    """

    chat_template_sha256: str | None = None
    slot_count: Annotated[int, Field(ge=1)] | None = None
    per_slot_context: Annotated[int, Field(ge=1)] | None = None
    speculative: bool | None = False
    # the KV cache's type, "<k>/<v>" ("q8_0" alone means both); only a router's /models says it
    kv_cache_type: Annotated[str, AfterValidator(_kv_cache_type)] | None = None


class SamplingSection(Section):
    """Sent with every request: the server's default temperature is 1.0."""

    temperature: Annotated[float, Field(ge=0, le=2)] = 0.6
    top_p: Annotated[float, Field(gt=0, le=1)] = 0.95
    top_k: Annotated[int, Field(ge=0)] = 20


class InferenceSection(Section):
    """loopd's inference client."""

    model: str = "default"  # the router's model id (preset section name)
    slots: SlotSection = Field(default_factory=SlotSection)
    sampling: SamplingSection = Field(default_factory=SamplingSection)
    serving: ServingSection = Field(default_factory=ServingSection)
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    liveness_timeout: Seconds = 60.0  # no bytes for this long after the first byte: give up
    first_byte_timeout: Seconds = 900.0  # queued behind another client, or a model loading
    # no first byte after this long: tell the channel it is waiting (server queue, model load)
    waiting_notice: Seconds = 2.0
    connect_timeout: Seconds = 10.0  # reaching inferproxy's socket
    retries: Annotated[int, Field(ge=0, le=20)] = 4
    retry_backoff: Seconds = 1.0  # first delay; doubles per attempt, with jitter
    thinking_cap: Annotated[int, Field(ge=1)] = 4096
    cache_loss_ratio: Annotated[float, Field(gt=0, le=1)] = 0.5  # cache_n below this share: loss
    baseline_budget: Annotated[int, Field(ge=1)] = 3000  # tokens, by the server's tokenizer
