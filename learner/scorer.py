"""The next-state scorer: a turn's scored copy carries `prm` (evaluative signal, a PRMScore) and
`opd` (directive signal, an OPDSignal; both in agent/turn.py); the turn it was given is not changed.

Which signals a mode needs is its entry in learner/modes.py.

The teacher is whichever `PolicyClient` is passed: a client of a frozen engine holding the
initial weights (the paper's code: its PRM engine is never updated) gives teacher = "frozen";
the policy's own client, which follows every weight update, gives teacher = "current". The
teacher scores the sampled response ids under the turn's messages with the hint appended to the
last user message, re-rendered with the chat template and the same tools. With an empty hint
the teacher scores the turn's own prompt ids, so for teacher = current the OPD advantage is 0.
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Iterable, Protocol

from agent.policy.base import PolicyClient
from agent.turn import OPDSignal, PRMScore, Turn
from learner.judges import Judge, Vote
from learner.modes import mode as mode_of
from learner.parsing import majority_vote, select_hint
from learner.prompts import messages_with_hint


class PromptRenderer(Protocol):
    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]: ...


class NextStateScorer:
    def __init__(
        self,
        judge: Judge,
        teacher: PolicyClient | None,
        renderer: PromptRenderer | None,
        n_votes: int | None = None,
        mode: str = "combine",
        teacher_timeout_s: float = 300.0,
    ) -> None:
        signals = mode_of(mode)
        self.use_prm, self.use_opd = signals.prm, signals.opd
        if self.use_opd and (teacher is None or renderer is None):
            raise ValueError(f"mode {mode!r} needs a teacher client and a chat renderer")
        self.judge = judge
        self.teacher = teacher
        self.renderer = renderer
        self.n_votes = n_votes
        self.mode = mode
        self.teacher_timeout_s = teacher_timeout_s

    async def score(self, turn: Turn) -> Turn:
        """The turn with the signals the mode needs, as a new record (`turn` itself is left as it
        was). An infra-failed turn comes back as it is, unscored."""
        if turn.status.is_infra:
            return turn
        prm, opd = await asyncio.gather(self._prm(turn), self._opd(turn))
        signals = {k: v for k, v in (("prm", prm), ("opd", opd)) if v is not None}
        return dataclasses.replace(turn, **signals)

    async def score_many(self, turns: Iterable[Turn], concurrency: int = 16) -> list[Turn]:
        """Scored copies of `turns`, in order, with at most `concurrency` in flight."""
        sem = asyncio.Semaphore(concurrency)

        async def one(t: Turn) -> Turn:
            async with sem:
                return await self.score(t)

        return list(await asyncio.gather(*(one(t) for t in turns)))

    async def _prm(self, turn: Turn) -> PRMScore | None:
        if not self.use_prm:
            return None
        try:
            votes = await self.judge.prm_votes(turn, self.n_votes)
        except Exception as e:  # a broken judge gives no vote; scoring never raises
            return PRMScore([], 0, [], error=f"judge: {type(e).__name__}: {e}")
        scores = [v.score for v in votes]
        return PRMScore(scores, majority_vote(scores), [v.text for v in votes])

    async def _opd(self, turn: Turn) -> OPDSignal | None:
        if not self.use_opd:
            return None
        try:
            votes: list[Vote] = await self.judge.hint_votes(turn, self.n_votes)
        except Exception as e:
            return OPDSignal([], [], [], "", False, error=f"judge: {type(e).__name__}: {e}")
        hint, accepted = select_hint([(v.score, v.hint) for v in votes])
        opd = OPDSignal([v.score for v in votes], [v.hint for v in votes], [v.text for v in votes], hint, accepted)
        if accepted:
            try:
                opd.teacher_logprobs = await self.teacher_logprobs(turn, hint)
            except Exception as e:  # no teacher signal for this turn; the rest goes on
                opd.accepted = False
                opd.error = f"teacher: {type(e).__name__}: {e}"
        return opd

    async def teacher_logprobs(self, turn: Turn, hint: str) -> list[float]:
        """Log-probs of turn.response_ids under the hint-conditioned prompt (the turn's own
        prompt ids when the hint is empty)."""
        assert self.teacher is not None and self.renderer is not None
        if hint:
            prompt = self.renderer.render_prompt(messages_with_hint(turn.messages, hint), turn.tools or None)
        else:
            prompt = list(turn.prompt_ids)
        ids = prompt + list(turn.response_ids)
        lps = await asyncio.wait_for(self.teacher.score(ids, len(prompt)), timeout=self.teacher_timeout_s)
        if len(lps) != len(turn.response_ids):
            raise ValueError(f"teacher returned {len(lps)} log-probs for {len(turn.response_ids)} response tokens")
        return [float(x) for x in lps]
