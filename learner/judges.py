"""Judges: turn one (action, next state) into votes.

A judge gives PRM votes (score in {1, 0, -1}, or None for a failed vote) and hint votes (score
in {1, -1} or None, plus a hint). Two kinds:

- `LLMJudge`: any chat client with `async complete(messages, temperature=, max_tokens=, n=1)
  -> list[str]` (agent/policy/chat_client.py, or anything shaped like it). n_votes calls run
  concurrently; an exception, a timeout or a text with no valid box is an invalid vote (None),
  never a crash.
- `RulesJudge`: no model; reads what the env wrote into NextState.data. Deterministic, so it
  gives one vote whatever n_votes is asked (equal votes would change neither majority nor mean).
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Callable, Protocol

from agent.turn import Turn
from envs.base import NextState, Status
from learner import prompts
from learner.parsing import HINT_VALUES, PRM_VALUES, parse_boxed, parse_hint


@dataclasses.dataclass
class Vote:
    score: int | None  # None: the judge failed or answered nonsense
    hint: str = ""
    text: str = ""  # the judge's full answer (or the error), kept in the trace


class Judge(Protocol):
    async def prm_votes(self, turn: Turn, n_votes: int | None = None) -> list[Vote]: ...

    async def hint_votes(self, turn: Turn, n_votes: int | None = None) -> list[Vote]: ...


class ChatCompleter(Protocol):
    async def complete(self, messages: list[dict[str, Any]], temperature: float = ..., max_tokens: int = ..., n: int = 1) -> list[str]: ...


class LLMJudge:
    """PRM and hint votes from a language model, n_votes concurrent calls per turn."""

    def __init__(self, client: ChatCompleter, n_votes: int = 1, temperature: float = 0.6, max_tokens: int = 4096, timeout_s: float = 300.0) -> None:
        if n_votes < 1:
            raise ValueError(f"n_votes must be >= 1, got {n_votes}")
        self.client = client
        self.n_votes = n_votes
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    async def _one(self, messages: list[dict[str, Any]], parse: Callable[[str], Vote]) -> Vote:
        try:
            texts = await asyncio.wait_for(
                self.client.complete(messages, temperature=self.temperature, max_tokens=self.max_tokens, n=1),
                timeout=self.timeout_s,
            )
        except Exception as e:  # a failed or timed-out call is an invalid vote, never a crash
            return Vote(None, text=f"[judge error] {type(e).__name__}: {e}")
        if not isinstance(texts, (list, tuple)) or not texts or not isinstance(texts[0], str):
            return Vote(None, text=f"[judge error] unexpected reply {texts!r:.200}")
        return parse(texts[0])

    async def _votes(self, messages: list[dict[str, Any]], n_votes: int | None, parse: Callable[[str], Vote]) -> list[Vote]:
        n = self.n_votes if n_votes is None else n_votes
        return list(await asyncio.gather(*(self._one(messages, parse) for _ in range(n))))

    async def prm_votes(self, turn: Turn, n_votes: int | None = None) -> list[Vote]:
        return await self._votes(prompts.prm_messages(turn), n_votes, lambda t: Vote(parse_boxed(t, PRM_VALUES), text=t))

    async def hint_votes(self, turn: Turn, n_votes: int | None = None) -> list[Vote]:
        def parse(t: str) -> Vote:
            score = parse_boxed(t, HINT_VALUES)
            return Vote(score, hint=parse_hint(t) if score == 1 else "", text=t)

        return await self._votes(prompts.hint_messages(turn), n_votes, parse)


def _int_or_none(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def generic_verdict(turn: Turn) -> tuple[int, str]:
    """(verdict, hint) from what a program can read about the turn. The rule, in order:

    1. next_state.data["verdict"] (+1/0/-1) and data["hint"] when the env provides them (a
       simulated user's judgement and correction, a custom env's process signal);
    2. the turn's status: invalid_action or env_error (the action could not run, or raised) -> -1;
    3. kind "tests": failed > 0, or passed == 0 -> -1; all of passed > 0 passed -> +1;
    4. kind "shell" / "tool_result": data["error"] set or a nonzero exit code
       (data["exit_code"] or data["returncode"]) -> -1; exit code 0 -> +1;
    5. anything else -> 0 (no evidence either way: a screen, a user reply without a verdict).
    Only rule 1 yields a hint.
    """
    ns: NextState = turn.next_state
    data = ns.data or {}
    verdict = _int_or_none(data.get("verdict"))
    if verdict in PRM_VALUES:
        return verdict, str(data.get("hint") or "")
    hint = str(data.get("hint") or "")
    if turn.status in (Status.INVALID_ACTION, Status.ENV_ERROR):
        return -1, hint
    if ns.kind == "tests":
        passed, failed = _int_or_none(data.get("passed")), _int_or_none(data.get("failed"))
        if failed is not None and failed > 0 or passed == 0:
            return -1, hint
        if passed is not None and passed > 0:
            return 1, hint
        return 0, hint
    if ns.kind in ("shell", "tool_result"):
        if data.get("error"):
            return -1, hint
        code = _int_or_none(data.get("exit_code", data.get("returncode")))
        if code is not None:
            return (1 if code == 0 else -1), hint
    return 0, hint


class RulesJudge:
    """Votes from `rule(turn) -> (verdict, hint)`; `generic_verdict` by default (an env can
    pass its own rule). The hint vote is +1 with the hint when the rule gives one, else -1."""

    def __init__(self, rule: Callable[[Turn], tuple[int, str]] = generic_verdict) -> None:
        self.rule = rule

    async def prm_votes(self, turn: Turn, n_votes: int | None = None) -> list[Vote]:
        verdict, _ = self.rule(turn)
        return [Vote(verdict, text=f"[rules] verdict {verdict}")]

    async def hint_votes(self, turn: Turn, n_votes: int | None = None) -> list[Vote]:
        _, hint = self.rule(turn)
        if hint:
            return [Vote(1, hint=hint, text=f"[rules] hint from {turn.next_state.kind}")]
        return [Vote(-1, text="[rules] no hint")]
