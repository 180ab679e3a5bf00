"""The chat-completions shapes Boxmaker sends to the model and keeps in its logs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from ._base import Flag, Model, Text


class FunctionCall(Model):
    name: Text
    arguments: Text  # the JSON text exactly as the server streamed it; never re-encoded


class ToolCall(Model):
    id: Text
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(Model):
    role: Literal["system"] = "system"
    content: Text


class UserMessage(Model):
    role: Literal["user"] = "user"
    content: Text


class AssistantMessage(Model):
    """An assistant turn replayed exactly as the server returned it (the append-only rule)."""

    role: Literal["assistant"] = "assistant"
    content: Text | None = None
    reasoning_content: Text | None = None
    tool_calls: list[ToolCall] | None = None


class ToolMessage(Model):
    role: Literal["tool"] = "tool"
    tool_call_id: Text
    content: Text


ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]


class ToolSchema(Model):
    """A tool the model can be told about. ``core`` tools sit in the epoch's fixed tools array;
    the rest are found with ``find_tool`` and reached through ``call_tool``."""

    name: Annotated[Text, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
    description: Text
    parameters: dict[str, Any]
    core: Flag = False

    def as_openai_tool(self) -> dict[str, Any]:
        """The entry for a request's ``tools`` array."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def message_json(
    message: SystemMessage | UserMessage | AssistantMessage | ToolMessage,
) -> dict[str, object]:
    """A message as it goes into a request body: fields that are None are left out."""
    return message.model_dump(mode="json", exclude_none=True)
