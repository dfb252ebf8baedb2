"""Assistant replies written without a model: the oracle (passes the rubric) and random ones.

The oracle writes a plain answer for the persona's role, then lets each rubric item repair it
(strip bold, add a warm word, pad to a length...), so it also fits personas users write.
Random replies mix the things personas object to: markdown, lists, "Final answer", short and
cold or long and warm, right or wrong answers, empty and junk text.
"""
from __future__ import annotations

import numpy as np

from envs.chat_sim.persona import Persona
from envs.chat_sim.problems import Problem
from envs.chat_sim.rubric import failed_items


def _base(persona: Persona, problem: Problem) -> str:
    steps = " ".join(problem.steps)
    if persona.role == "student":
        return f"ok so here's how it goes. {steps} so the answer is {problem.answer}."
    if problem.student_answer == problem.answer:
        verdict = (f"Your answer of {problem.student_answer} is exactly right, well done! "
                   "You set the problem up carefully and every step follows from the one before.")
    else:
        verdict = (f"You wrote {problem.student_answer}, and the correct answer is {problem.answer}. "
                   "You set the problem up nicely, and the slip is only near the end. "
                   f"Here is the idea: {steps}")
    return (f"Great work on this problem! {verdict} I really like how you showed your working, it makes "
            "your thinking easy to follow. Keep it up, next time try checking the last step again "
            "before you write your answer. I'm proud of the effort you put in.")


def _repaired(persona: Persona, text: str, ctx: dict) -> str:
    for _ in range(3):  # a repair can undo another (pad then strip); a few rounds settle it
        failed = failed_items(list(persona.rubric), text, ctx)
        if not failed:
            break
        for item in failed:
            text = item.repair(text, ctx)
    return text


def oracle_response(persona: Persona, problem: Problem) -> str:
    """A reply meeting every rubric item of the persona: the role's plain answer repaired, or,
    where its items fight (a word cap against a long answer), one built from nothing."""
    ctx = problem.context()
    tries = [_repaired(persona, base, ctx) for base in (_base(persona, problem), "")]
    return min(tries, key=lambda t: len(failed_items(list(persona.rubric), t, ctx)))


JUNK = ["", "   ", "???", "\u2603\u2603 \ud83d\ude00", "<tool_call>{\"name\": \"x\"}</tool_call>", "lorem ipsum " * 40]


def random_response(rng: np.random.Generator, persona: Persona, problem: Problem) -> str:
    """A random but plausible reply: each AI-ish or cold/warm trait toggled at random."""
    if rng.random() < 0.1:
        return JUNK[int(rng.integers(len(JUNK)))]
    answer = problem.answer if rng.random() < 0.6 else str(int(rng.integers(0, 1000)))
    steps = list(problem.steps)
    if rng.random() < 0.3:
        steps = steps[:1]
    parts = []
    if rng.random() < 0.3:
        parts.append(str(rng.choice(["Sure! Here is the solution.", "Certainly.", "Here's my take:"])))
    if rng.random() < 0.3:
        parts.append("## Solution")
    if rng.random() < 0.5:
        bullet = str(rng.choice(["-", "*", "1.", "Step 1:"]))
        parts += [f"{bullet} {s}" for s in steps]
    else:
        parts.append(" ".join(steps))
    if rng.random() < 0.4:
        parts.append(f"**Final answer:** {answer}")
    elif rng.random() < 0.3:
        parts.append(f"Therefore, the result is $\\boxed{{{answer}}}$.")
    else:
        parts.append(f"so it's {answer}, pretty easy once you see it.")
    if rng.random() < 0.4:
        parts.append(str(rng.choice(["Great job, well done!", "Keep it up, you can do it!", "I'm proud of you."])))
    if rng.random() < 0.2:
        parts.append(" ".join(["This part matters because each quantity builds on the last."] * int(rng.integers(1, 6))))
    sep = "\n" if rng.random() < 0.6 else " "
    return sep.join(parts)
