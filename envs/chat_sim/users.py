"""Simulated users: who reads the assistant's reply and answers as the persona.

Both backends return a `UserReply`; its verdict (+1 satisfied, -1 asked for a change, 0 no
judgement) and hint (the directive part, a hindsight hint for OPD) go into NextState.data.

  ScriptedUser  deterministic: applies the persona's rubric and phrases each failed item with
                its complaint (evaluative part) and directive (directive part).
  LLMUser       a language model plays the persona through the caller's `complete(messages)
                -> str` (envs import nothing from agent/). Its history is role-swapped as in
                the paper: its own messages are "assistant", the agent's are "user" prefixed
                "The AI assistant replied:". Its verdict is structured: the reply must end with
                the line `VERDICT: satisfied` or `VERDICT: unsatisfied`, parsed strictly (a done
                phrase quoted anywhere in the text decides nothing). A reply that is not usable
                (the call raised, empty, no letters, far too long, role confusion, no verdict
                line) falls back to the scripted reply.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from envs.chat_sim.persona import Persona
from envs.chat_sim.rubric import failed_items

Complete = Callable[[list[dict[str, str]]], str]
AGENT_PREFIX = "The AI assistant replied:"
MAX_USER_CHARS = 4000  # a simulated user's message longer than this is treated as nonsense
VERDICT_LINE = re.compile(r"\AVERDICT: (satisfied|unsatisfied)\Z")  # the whole last line, nothing else
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


@dataclasses.dataclass
class UserReply:
    content: str
    verdict: int  # +1 satisfied, -1 asked for a change, 0 no judgement
    hint: str  # the directive part ("" when satisfied)
    failed: list[str]  # rubric items the assistant's reply failed (always by rules)
    satisfied: bool
    source: str = "rubric"  # "rubric" or "llm"
    fallback_reason: str = ""  # why an LLM reply was replaced by the scripted one

    def data(self) -> dict[str, Any]:
        d = {"verdict": self.verdict, "hint": self.hint, "failed": list(self.failed),
             "satisfied": self.satisfied, "user_source": self.source}
        if self.fallback_reason:
            d["user_fallback"] = self.fallback_reason
        return d


def _pick(options: tuple[str, ...], turn: int) -> str:
    return options[turn % len(options)]


class ScriptedUser:
    def __init__(self, persona: Persona) -> None:
        self.persona = persona

    def reply(self, ctx: dict[str, Any], history: list[dict[str, str]], action: str, turn: int) -> UserReply:
        p = self.persona
        failed = failed_items(list(p.rubric), action, ctx)
        names = [it.name for it in failed]
        if not failed:
            return UserReply(p.satisfied_message, +1, "", names, True)
        directives = " ".join(_pick(it.directive, turn) for it in failed)
        if not action.strip():
            return UserReply(p.empty_reply, -1, directives, names, False)
        complaints = " ".join(_pick(it.complaint, turn) for it in failed)
        content = p.rewrite_template.format(complaints=complaints, directives=directives)
        return UserReply(content, -1, directives, names, False)


def persona_prompt(p: Persona) -> str:
    """The system prompt that makes a language model play the persona."""
    prefs = "\n".join(f"- {it.preference}" for it in p.rubric)
    return (
        f"{p.description}\n\n"
        "You are chatting with an AI assistant. You already sent your first message (it is your "
        "earlier turn below). These are your preferences; the assistant does not know them:\n"
        f"{prefs}\n\n"
        "Each time the assistant replies, check its reply against every preference. If any is not "
        "met, answer in character in one to three short sentences: say what you don't like about "
        "it, then say what to change. Never solve, rewrite or grade anything yourself. If every "
        f"preference is met, reply with exactly: {p.satisfied_message}\n"
        f"Never write {p.done_phrase} unless every preference is met.\n"
        "End every reply with one more line, exactly `VERDICT: satisfied` when every preference "
        "is met, or `VERDICT: unsatisfied` otherwise."
    )


def split_verdict(text: str) -> tuple[str, bool | None]:
    """(the message without its verdict line, satisfied?) from an LLM user's reply; None when
    the last non-empty line is not exactly a verdict line."""
    lines = text.rstrip().split("\n")
    m = VERDICT_LINE.match(lines[-1].strip())
    if m is None:
        return text, None
    return "\n".join(lines[:-1]).strip(), m.group(1) == "satisfied"


def _unusable(text: Any, action: str) -> str:
    """Why an LLM user's reply cannot be used ('' when it can)."""
    if not isinstance(text, str):
        return f"not text ({type(text).__name__})"
    if not text.strip():
        return "empty"
    if not re.search(r"[A-Za-z]", text):
        return "no words"
    if len(text) > MAX_USER_CHARS:
        return f"longer than {MAX_USER_CHARS} characters"
    if AGENT_PREFIX.lower() in text.lower():
        return "role confusion"
    if action.strip() and text.strip() == action.strip():
        return "echoed the assistant"
    return ""


class LLMUser:
    def __init__(self, persona: Persona, complete: Complete) -> None:
        if not callable(complete):
            raise ValueError("user='llm' needs complete=<callable(messages) -> str>")
        self.persona = persona
        self.complete = complete
        self.scripted = ScriptedUser(persona)

    def swapped(self, history: list[dict[str, str]], action: str) -> list[dict[str, str]]:
        """The simulator's view: its own turns are 'assistant', the agent's are 'user'."""
        msgs = [{"role": "system", "content": persona_prompt(self.persona)}]
        for m in history + [{"role": "assistant", "content": action}]:
            if m["role"] == "user":
                msgs.append({"role": "assistant", "content": m["content"]})
            elif m["role"] == "assistant":
                msgs.append({"role": "user", "content": f"{AGENT_PREFIX}\n{m['content']}"})
        return msgs

    def reply(self, ctx: dict[str, Any], history: list[dict[str, str]], action: str, turn: int) -> UserReply:
        rules = self.scripted.reply(ctx, history, action, turn)
        try:
            raw = self.complete(self.swapped(history, action))
        except Exception as e:  # the caller's client failed: the session goes on with rules
            rules.fallback_reason = f"complete() raised {type(e).__name__}: {e}"[:300]
            return rules
        text = _THINK.sub("", raw).strip() if isinstance(raw, str) else raw
        reason = _unusable(text, action)
        if not reason:
            text, done = split_verdict(text)
            reason = "no VERDICT line" if done is None else "" if done else _unusable(text, action)
        if reason:
            rules.fallback_reason = reason
            return rules
        text = text or self.persona.satisfied_message
        return UserReply(text, +1 if done else -1, "" if done else text, rules.failed, bool(done), source="llm")


def make_user(persona: Persona, user: str, complete: Complete | None) -> ScriptedUser | LLMUser:
    if user == "scripted":
        return ScriptedUser(persona)
    if user == "llm":
        return LLMUser(persona, complete)
    raise ValueError(f"user must be 'scripted' or 'llm', got {user!r}")
