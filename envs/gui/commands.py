"""GUI actions as text commands, parsed from the model's raw output.

    click(ref)            click the element with that id
    click_xy(x, y)        click at screenshot pixel (x, y)
    type(ref, "text")     click the element, then type the text
    key("Enter")          press a key or a combination ("Tab", "a", "ctrl+a")
    scroll(dx, dy)        scroll by (dx, dy) pixels at the middle of the screen
    done()                declare the task finished (ends the episode)

The last command in the output counts (a model may think aloud first); <think> blocks are
ignored. The same commands are accepted as a Hermes tool call
(<tool_call>{"name": "click", "arguments": {"ref": 3}}</tool_call>). Parsing never raises:
what cannot be read comes back as an error message for the agent.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any

from envs.tool_calls import function_schema, parse_action

#: command -> (argument names, argument kinds)
SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[type, ...]]] = {
    "click": (("ref",), (int,)),
    "click_xy": (("x", "y"), (float, float)),
    "type": (("ref", "text"), (int, str)),
    "key": (("key",), (str,)),
    "scroll": (("dx", "dy"), (float, float)),
    "done": ((), ()),
}
_DESCRIPTIONS = {
    "click": "Click the element with this id.",
    "click_xy": "Click at pixel (x, y) of the screenshot.",
    "type": "Click the element with this id, then type the text.",
    "key": 'Press a key or a combination, e.g. "Enter", "Tab", "Backspace", "ctrl+a".',
    "scroll": "Scroll by (dx, dy) pixels.",
    "done": "Declare the task finished.",
}
_JSON_TYPES = {int: "integer", float: "number", str: "string"}
_CALL_START = re.compile(r"\b(" + "|".join(sorted(SIGNATURES, key=len, reverse=True)) + r")\s*\(")
_ANY_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


class ActionError(ValueError):
    """A well-formed command the backend cannot carry out (an unknown key name, an element
    that cannot be clicked): the env reports invalid_action."""


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    args: tuple[Any, ...] = ()
    via_tool: bool = dataclasses.field(default=False, compare=False)  # came in a <tool_call>

    def __str__(self) -> str:
        return f"{self.name}({', '.join(repr(a) if isinstance(a, str) else fmt_num(a) for a in self.args)})"


def fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def parse_command(raw: str) -> Command | str:
    """The command in a model's output, or an error message saying what is wrong with it."""
    text = _THINK.sub("", raw)
    if "<tool_call>" in text:
        return _from_tool_call(text)
    matches = list(_CALL_START.finditer(text))
    if not matches:
        other = _ANY_CALL.findall(text)
        if other:
            return f"Unknown command {other[-1]!r}; use one of {', '.join(SIGNATURES)}."
        return (
            "No command found. End your reply with one command: click(id), click_xy(x, y), "
            'type(id, "text"), key("Enter"), scroll(dx, dy) or done().'
        )
    m = matches[-1]
    return _from_source(text[m.start():].split("\n", 1)[0].strip(), m.group(1))


def _from_source(line: str, name: str) -> Command | str:
    end = line.rfind(")")
    if _unbalanced_quotes(line):
        return f"Unbalanced quotes in {line!r}: close every string you open."
    if end < 0:
        return f"Missing closing parenthesis in {line!r}."
    try:
        call = ast.parse(line[: end + 1], mode="eval").body
    except SyntaxError:
        return f"Could not read {line[: end + 1]!r}: write it as {name}(...) with literal arguments."
    if not isinstance(call, ast.Call) or call.keywords and call.args:
        return f"Could not read {line[: end + 1]!r}: pass arguments by position, e.g. {_example(name)}."
    try:
        if call.keywords:
            names = SIGNATURES[name][0]
            given = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            if set(given) != set(names):
                return f"{name} takes arguments {', '.join(names) or 'none'}; got {', '.join(map(str, given))}."
            args = [given[n] for n in names]
        else:
            args = [ast.literal_eval(a) for a in call.args]
    except ValueError:
        return f"Arguments of {name} must be literals (numbers or quoted strings), e.g. {_example(name)}."
    return _typed(name, args)


def _unbalanced_quotes(line: str) -> bool:
    quote = None
    escaped = False
    for ch in line:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
    return quote is not None


def _from_tool_call(text: str) -> Command | str:
    parsed = parse_action(text)
    if parsed.errors:
        return parsed.errors[0]
    if not parsed.calls:
        return "No command found in the tool call."
    call = parsed.calls[-1]
    if call.name not in SIGNATURES:
        return f"Unknown command {call.name!r}; use one of {', '.join(SIGNATURES)}."
    names = SIGNATURES[call.name][0]
    missing = [n for n in names if n not in call.arguments]
    if missing:
        return f"{call.name} needs argument(s) {', '.join(missing)}."
    return _typed(call.name, [call.arguments[n] for n in names], via_tool=True)


def _typed(name: str, args: list[Any], via_tool: bool = False) -> Command | str:
    names, kinds = SIGNATURES[name]
    if len(args) != len(names):
        return f"{name} takes {len(names)} argument(s) ({', '.join(names) or 'none'}), got {len(args)}: e.g. {_example(name)}."
    out = []
    for arg, arg_name, kind in zip(args, names, kinds):
        if kind is str:
            if not isinstance(arg, str):
                return f"{arg_name} of {name} must be a quoted string, e.g. {_example(name)}."
            out.append(arg)
        elif isinstance(arg, bool) or not isinstance(arg, (int, float)) or (kind is int and not float(arg).is_integer()):
            return f"{arg_name} of {name} must be {'an integer element id' if kind is int else 'a number'}, got {arg!r}."
        else:
            out.append(kind(arg))
    return Command(name, tuple(out), via_tool)


def _example(name: str) -> str:
    return {"click": "click(3)", "click_xy": "click_xy(80, 120)", "type": 'type(5, "hello")',
            "key": 'key("Enter")', "scroll": "scroll(0, 100)", "done": "done()"}[name]


def tool_schemas() -> list[dict[str, Any]]:
    """The commands as OpenAI-style tool schemas (for policies that emit tool calls)."""
    schemas = []
    for name, (names, kinds) in SIGNATURES.items():
        props = {n: {"type": _JSON_TYPES[k]} for n, k in zip(names, kinds)}
        schemas.append(function_schema(name, _DESCRIPTIONS[name], props, list(names)))
    return schemas
