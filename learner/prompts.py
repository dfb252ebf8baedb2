"""Prompts for the LLM judges: the PRM judge (is this action good, given what followed?) and the
hint judge (does what followed reveal a hint that would have improved the action?).

Written for this project. Unlike the paper's judge, ours sees the conversation context (the last
user request and the most recent messages, each shortened), not only the action and next state:
a reply such as "no, the other file" can only be judged against what was asked.
"""
from __future__ import annotations

import json
from typing import Any

from agent.turn import Turn

#: how much context the judge sees (characters; long texts keep their head and tail)
CONTEXT_MESSAGES = 6
MESSAGE_CHARS = 1500
REQUEST_CHARS = 3000
ACTION_CHARS = 4000
NEXT_STATE_CHARS = 4000

_ROLES = """The next state has a role:
- role "user": the user's reply to the action. Thanks, approval or moving on to a new request \
mean the action served them. A request to redo, fix, change or undo something, a complaint, or \
the user asking the same thing again in other words means it did not: a request for changes is \
negative feedback.
- role "tool": what running the action produced (command output, a tool result, test results, a \
new screen). It exists because the assistant acted. Output without errors that shows the \
intended effect counts in the action's favour; an error, a failing test, a crash or output \
showing no effect or the wrong one, caused by the action, counts against it. What a tool \
returns is new information, not something the assistant should have known before acting."""

PRM_SYSTEM = f"""You judge single steps of an AI assistant that acts in an environment (a \
terminal, a code repository, a tool, a screen, or a conversation with a user). You see the \
conversation so far, the assistant's latest action, and the next state: what came back right \
after that action. Decide whether the action moved the user's task forward, using the next \
state as your evidence.

{_ROLES}

Scores:
\\boxed{{1}}: the action made progress (the user moves on or is satisfied, the environment \
confirms it worked, the tool succeeded with the intended effect).
\\boxed{{-1}}: the action failed or was wrong (an error it caused, failing tests, a wasted or \
circular step, a correction, redo or change request from the user).
\\boxed{{0}}: the next state says nothing clear about the action (an unrelated follow-up, \
ambiguous output).

Reason briefly: first say whether the next state shows (a) progress, (b) failure or \
correction, or (c) nothing clear, then give exactly one boxed score on the last line."""

HINT_SYSTEM = f"""You write hindsight hints for an AI assistant that acts in an environment (a \
terminal, a code repository, a tool, a screen, or a conversation with a user). You see the \
conversation so far, the assistant's action at step t, and the next state at step t+1. Decide \
whether the next state reveals something that, had the assistant known it before acting, \
would have led to a clearly better action: a correction or preference the user stated, an \
error message that points to the fix, a failing test that shows the intended behaviour, a fact \
the environment revealed.

{_ROLES}

Answer format, strictly:
- If it does: \\boxed{{1}}, then one hint of one to three sentences between [HINT_START] and \
[HINT_END]. Write the hint as an instruction to the assistant before it acts: concrete and \
actionable, with the details that matter (names, values, commands). Do not mention the next \
state or that this is a hint.
- If it does not (the action was already right, or the next state adds nothing useful): \
\\boxed{{-1}} and no hint block.
Give exactly one boxed score."""

PRM_ASK = "Is the next state (a) progress, (b) failure or correction, or (c) unclear? Reason briefly, then give one boxed score: \\boxed{1}, \\boxed{0} or \\boxed{-1}."
HINT_ASK = "Does the next state reveal a useful hindsight hint for this action? Answer \\boxed{1} with [HINT_START]...[HINT_END], or \\boxed{-1}."


def clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, keeping its head and tail (errors sit at the end)."""
    if len(text) <= limit:
        return text
    keep = max(limit // 2, 1)
    return f"{text[:keep]}\n[... {len(text) - 2 * keep} characters cut ...]\n{text[-keep:]}"


def message_text(message: dict[str, Any]) -> str:
    """A chat message's content as plain text (multimodal parts flattened; images named)."""
    content = message.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        text = "\n".join(parts)
    else:
        text = json.dumps(content, ensure_ascii=False, default=str)
    if message.get("tool_calls"):
        text = f"{text}\n[tool calls] {json.dumps(message['tool_calls'], ensure_ascii=False, default=str)}".strip()
    return text


def context_text(messages: list[dict[str, Any]]) -> str:
    """The last user request plus the most recent messages, each shortened."""
    body = [m for m in messages if m.get("role") != "system"]
    start = max(len(body) - CONTEXT_MESSAGES, 0)
    last_user = next((i for i in range(len(body) - 1, -1, -1) if body[i].get("role") == "user"), None)
    lines = []
    if last_user is not None and last_user < start:
        lines.append(f"[user, the latest request]\n{clip(message_text(body[last_user]), REQUEST_CHARS)}")
        lines.append("[... earlier steps omitted ...]")
    for i in range(start, len(body)):
        limit = REQUEST_CHARS if i == last_user else MESSAGE_CHARS
        lines.append(f"[{body[i].get('role', '?')}]\n{clip(message_text(body[i]), limit)}")
    return "\n\n".join(lines) if lines else "(no earlier messages)"


def _user_message(turn: Turn, ask: str) -> str:
    ns = turn.next_state
    return (
        "## Conversation so far (oldest first; long messages shortened)\n"
        f"{context_text(turn.messages)}\n\n"
        "## The assistant's action\n"
        f"{clip(turn.action, ACTION_CHARS)}\n\n"
        f"## Next state (role: {ns.role}, kind: {ns.kind})\n"
        f"{clip(ns.content, NEXT_STATE_CHARS)}\n\n"
        f"{ask}"
    )


def prm_messages(turn: Turn) -> list[dict[str, str]]:
    """Chat messages asking the PRM judge for one vote on `turn`."""
    return [{"role": "system", "content": PRM_SYSTEM}, {"role": "user", "content": _user_message(turn, PRM_ASK)}]


def hint_messages(turn: Turn) -> list[dict[str, str]]:
    """Chat messages asking the hint judge for one (score, hint) vote on `turn`."""
    return [{"role": "system", "content": HINT_SYSTEM}, {"role": "user", "content": _user_message(turn, HINT_ASK)}]


HINT_HEADER = "\n\n[user's hint / instruction]\n"


def messages_with_hint(messages: list[dict[str, Any]], hint: str) -> list[dict[str, Any]]:
    """A copy of `messages` with the hint appended to the last user message (the last message
    when no user message exists; a new user message when the list is empty)."""
    out = [dict(m) for m in messages]
    if not out:
        return [{"role": "user", "content": HINT_HEADER.lstrip("\n") + hint}]
    idx = next((i for i in range(len(out) - 1, -1, -1) if out[i].get("role") == "user"), len(out) - 1)
    out[idx]["content"] = message_text({"content": out[idx].get("content")}) + HINT_HEADER + hint
    return out
