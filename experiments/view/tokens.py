"""Per-token text and per-token values of a response: what the episode page colours.

turns.jsonl holds token ids, not token texts, so each token's text comes from the run's own
tokenizer. The value of a token is what pushed it in training: for opd and combine, when the
turn has an accepted hint, the teacher's log-prob minus the sampler's (learner.advantages's OPD
term, read from the recorded teacher and rollout log-probs); otherwise the turn's advantage as
the learner recorded it (turn.meta["advantage"]); none in eval runs or for turns that made no
sample.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any

from agent.turn import Turn
from learner.advantages import teacher_term

#: A run of tokens that does not finish a character within this many tokens is shown as decoded
#: (random byte-level output is mostly invalid UTF-8).
_MAX_PARTIAL = 8
_TURN_FIELDS = tuple(f.name for f in dataclasses.fields(Turn))


def token_pieces(tok: Any, ids: list[int]) -> list[str]:
    """The text each token adds; the pieces join to the decoded text. A token that ends inside a
    multi-byte character adds "" and the token that completes the character carries it."""
    if not ids:
        return []

    def decode(part: list[int]) -> str:
        return tok.decode(part, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    singles = tok.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if "".join(singles) == decode(ids):  # byte-level BPE on whole characters: one call for all
        return singles
    # Incremental detokenisation (as streaming servers do): decode a short window before the
    # token with and without it; the difference is its text once it ends a whole character.
    pieces, prefix, read = [], 0, 0
    for i in range(len(ids)):
        before, after = decode(ids[prefix:read]), decode(ids[prefix:i + 1])
        if after.startswith(before) and len(after) > len(before) and (not after.endswith("\ufffd") or i + 1 - read >= _MAX_PARTIAL):
            pieces.append(after[len(before):])
            prefix, read = read, i + 1
        else:
            pieces.append("")
    if read < len(ids):
        pieces[-1] = decode(ids[prefix:])[len(decode(ids[prefix:read])):]
    return pieces


def token_values(turn: dict[str, Any], mode: str) -> tuple[list[float] | None, str]:
    """(one value per response token or None, what the values are)."""
    n = len(turn.get("response_ids") or [])
    if mode in ("opd", "combine"):
        term = teacher_term(Turn.from_json({k: turn[k] for k in _TURN_FIELDS if k in turn}))
        if term is not None:
            return term, "teacher - student log-prob"
    adv = (turn.get("meta") or {}).get("advantage")
    if isinstance(adv, dict) and isinstance(adv.get("mean"), (int, float)):
        masked = " (masked: no loss)" if adv.get("masked") else ""
        return [float(adv["mean"])] * n, f"the turn's advantage{masked}"
    return None, "no advantage (an eval run, or the turn made no training sample)"


def colour(value: float, scale: float) -> str:
    """CSS background of a token: green pushed up, red pushed down, opacity |value| / scale."""
    alpha = round(min(1.0, abs(value) / scale) * 0.85, 3) if scale > 0 else 0.0
    if value == 0 or alpha == 0:
        return "transparent"
    return f"rgba(22, 163, 74, {alpha})" if value > 0 else f"rgba(220, 38, 38, {alpha})"


class RunTokenizer:
    """The run's tokenizer, loaded on first use (oracle runs record no token ids and need none);
    the episode pages and the W&B token panels (experiments/run.py) colour tokens with it."""

    def __init__(self, config: dict[str, Any]) -> None:
        model = config.get("model") or {}
        self.name = str(model.get("path") or model.get("name") or "")
        self._tok: Any = None
        self._failed = False

    def get(self) -> Any:
        if self._tok is None and not self._failed and self.name:
            from agent.policy.models import load_tokenizer

            try:
                self._tok = load_tokenizer(self.name)
            except Exception as e:  # a model folder that is gone: pages show the action text
                self._failed = True
                print(f"warning: no tokenizer for model {self.name!r} ({type(e).__name__}: {e}); "
                      "responses are shown uncoloured", file=sys.stderr)
        return self._tok
