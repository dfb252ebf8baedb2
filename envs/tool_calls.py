"""Hermes/Qwen-style tool calls in raw model text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

Envs parse the assistant's raw output with `parse_action`; the agent side renders tool calls
(oracles, prompts) with `render_tool_call`. Parsing never raises: what cannot be read comes
back in `errors`, phrased for the agent to read.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN = "<tool_call>"


@dataclasses.dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass
class ParsedAction:
    text: str  # the assistant's text outside tool calls
    calls: list[ToolCall]
    errors: list[str]  # one message per tool call that could not be read


def parse_action(raw: str) -> ParsedAction:
    """Split raw assistant output into prose and tool calls."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for m in _CALL.finditer(raw):
        body = m.group(1).strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            errors.append(f"tool call is not valid JSON ({e.msg} at position {e.pos})")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append('tool call must be a JSON object with a string "name"')
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models emit arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                errors.append(f'arguments of tool "{obj["name"]}" are a string that is not JSON')
                continue
        if not isinstance(args, dict):
            errors.append(f'arguments of tool "{obj["name"]}" must be a JSON object')
            continue
        calls.append(ToolCall(name=obj["name"], arguments=args))
    text = _CALL.sub("", raw)
    if _OPEN in text:  # an opened call that never closed (cut by the token limit, say)
        errors.append("tool call was opened with <tool_call> but never closed with </tool_call>")
        text = text[: text.index(_OPEN)]
    return ParsedAction(text=text.strip(), calls=calls, errors=errors)


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of one tool call, as a model trained on this format writes it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</tool_call>"


def function_schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An OpenAI-style tool schema."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }
