"""The serving settings a session's cache depends on, as the server reports them (docs/design.md,
"Serving settings are recorded, not owned").

    settings = await fetch_serving(client)           # GET /props, /slots and the router's /models
    for line in changes(recorded, settings): ...     # each change named, or none

``settings_from`` is pure. ``/props`` gives the chat template and the per-slot context, ``/slots``
the slot count and whether a slot decodes speculatively. Neither says how the KV cache is
stored: the router's ``/models`` lists each model's launch arguments, where ``--cache-type-k``
and ``--cache-type-v`` (default f16) say it; a server that is not a router, or a router that
does not list the model, leaves ``kv_cache_type`` unknown (None).
"""

from __future__ import annotations

from typing import Any

from bxcore.util import sha256
from pydantic import BaseModel, ConfigDict

from .client import InferenceClient
from .errors import BadStream, InferenceError

DEFAULT_CACHE_TYPE = "f16"
_CACHE_FLAGS = {"k": ("--cache-type-k", "-ctk"), "v": ("--cache-type-v", "-ctv")}


class ServingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_template_sha256: str | None  # None: /props served no template text
    kv_cache_type: str | None  # "<k>/<v>", e.g. "q8_0/q8_0"; None: the server does not say
    speculative: bool  # any slot decodes speculatively
    slot_count: int
    per_slot_context: int


def settings_from(props: Any, slots: Any, models: Any, model: str) -> ServingSettings:
    """The settings in the server's answers; BadStream naming the endpoint if one has an
    unexpected shape."""
    if not isinstance(props, dict):
        raise BadStream("/props is not a JSON object")
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise BadStream("/slots is not a JSON array of objects")
    context = (props.get("default_generation_settings") or {}).get("n_ctx")
    total = props.get("total_slots")
    if not isinstance(context, int) or not isinstance(total, int):
        raise BadStream("/props has no default_generation_settings.n_ctx or total_slots")
    template = props.get("chat_template")
    return ServingSettings(
        chat_template_sha256=sha256(template.encode()) if isinstance(template, str) else None,
        kv_cache_type=kv_cache_type(models, model),
        speculative=any(bool(s.get("speculative")) for s in slots),
        slot_count=total,
        per_slot_context=context,
    )


def kv_cache_type(models: Any, model: str) -> str | None:
    """"<k>/<v>" from the router's /models launch arguments of ``model``; None where they are
    not listed (pure)."""
    entries = models.get("data") if isinstance(models, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or model not in (entry.get("id"), *entry.get("aliases", ())):
            continue
        args = (entry.get("status") or {}).get("args")
        if not isinstance(args, list):
            return None
        return "/".join(_flag_value(args, _CACHE_FLAGS[part]) for part in ("k", "v"))
    return None


def _flag_value(args: list[Any], names: tuple[str, ...]) -> str:
    for index, arg in enumerate(args[:-1]):
        if arg in names:
            return str(args[index + 1])
    return DEFAULT_CACHE_TYPE


async def fetch_serving(client: InferenceClient) -> ServingSettings:
    """The configured model's settings now. ``/models`` is optional (only a router has it)."""
    props = await client.get_json("/props")
    slots = await client.get_json("/slots")
    try:
        models = await client.get_json("/models")
    except InferenceError:
        models = None
    return settings_from(props, slots, models, client.section.model)


def changes(before: ServingSettings, now: ServingSettings) -> list[str]:
    """Each setting that differs, named, with what it means for the session's cache."""
    found = []
    if before.chat_template_sha256 != now.chat_template_sha256:
        found.append(f"the chat template changed ({before.chat_template_sha256} -> "
                     f"{now.chat_template_sha256}): every cached prefix is gone")
    if before.kv_cache_type != now.kv_cache_type:
        found.append(f"the KV cache type changed ({before.kv_cache_type} -> "
                     f"{now.kv_cache_type}): every cached prefix is gone")
    if before.speculative != now.speculative:
        found.append(f"speculative decoding changed ({before.speculative} -> {now.speculative})")
    if before.slot_count != now.slot_count:
        found.append(f"the slot count changed ({before.slot_count} -> {now.slot_count})")
    if before.per_slot_context != now.per_slot_context:
        found.append(f"the per-slot context changed ({before.per_slot_context} -> "
                     f"{now.per_slot_context} tokens)")
    return found
