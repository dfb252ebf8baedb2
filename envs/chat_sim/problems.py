"""Homework problems for the simulated users: a seeded generated set, or a GSM8K-style JSONL file.

Every problem has a ground-truth answer, worked steps (what the oracle explains) and a student's
submission (what the teacher persona grades; right or wrong, seeded). Training and held-out sets
are disjoint: generated ones come from different seeds with shared questions removed; a file is
split by record index (every fifth record, index % 5 == 4, is held out).
"""
from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path
from typing import Any, Callable

SPLITS = ("train", "heldout")
TRAIN_SEED, HELDOUT_SEED = 0, 1_000_003


@dataclasses.dataclass(frozen=True)
class Problem:
    problem_id: str
    question: str
    answer: str  # ground truth, a number as text
    steps: tuple[str, ...]  # worked steps, one sentence each, without the final answer
    student_work: str  # a student's submission (teacher persona)
    student_answer: str  # the number the student gave

    def context(self) -> dict[str, str]:
        """Fields for persona templates and rubric checks."""
        return {"question": self.question, "answer": self.answer,
                "student_work": self.student_work, "student_answer": self.student_answer}


NAMES = [("Maya", "she"), ("Leo", "he"), ("Priya", "she"), ("Sam", "he"), ("Ana", "she"), ("Tom", "he"),
         ("Zoe", "she"), ("Omar", "he"), ("Lily", "she"), ("Ben", "he"), ("Nora", "she"), ("Ivan", "he")]
ITEMS = ["pencils", "marbles", "stickers", "apples", "cards", "shells", "crayons", "cookies"]

Gen = Callable[[random.Random], tuple[str, list[str], int]]


def _boxes(r: random.Random):
    (n, p), item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(3, 9), r.randint(4, 15)
    c = r.randint(1, a * b - 1)
    return (f"{n} has {a} boxes with {b} {item} in each box. {p.capitalize()} gives away {c} {item}. "
            f"How many {item} does {p} have left?",
            [f"{n} starts with {a} times {b}, which is {a * b} {item}.",
             f"Then {p} gives away {c}, and {a * b} minus {c} is {a * b - c}."], a * b - c)


def _shopping(r: random.Random):
    n, p = r.choice(NAMES)
    a, b, c = r.randint(2, 8), r.randint(2, 12), r.randint(1, 9)
    return (f"{n} buys {a} notebooks that cost ${b} each and one pen that costs ${c}. "
            f"How many dollars does {p} spend in total?",
            [f"The notebooks cost {a} times {b}, which is {a * b} dollars.",
             f"Adding the pen, {a * b} plus {c} is {a * b + c} dollars."], a * b + c)


def _savings(r: random.Random):
    n, p = r.choice(NAMES)
    a, b = r.randint(5, 25), r.randint(3, 10)
    c = r.randint(5, a * b - 1)
    return (f"{n} saves ${a} every week for {b} weeks and then spends ${c} on a video game. "
            f"How many dollars does {p} have left?",
            [f"In {b} weeks {p} saves {a} times {b}, which is {a * b} dollars.",
             f"After the game, {a * b} minus {c} leaves {a * b - c} dollars."], a * b - c)


def _sharing(r: random.Random):
    n, p = r.choice(NAMES)
    b, k = r.randint(2, 8), r.randint(3, 12)
    e = r.randint(1, k - 1)
    return (f"{n} bakes {b * k} cookies and shares them equally among {b} friends. Each friend eats {e} "
            f"cookies right away. How many cookies does each friend have left?",
            [f"Each friend gets {b * k} divided by {b}, which is {k} cookies.",
             f"After eating {e}, each friend has {k} minus {e}, which is {k - e}."], k - e)


def _ages(r: random.Random):
    n, p = r.choice(NAMES)
    a, b, c = r.randint(6, 15), r.randint(2, 9), r.randint(2, 10)
    total = a + (a + b) + 2 * c
    return (f"{n} is {a} years old and {n}'s brother is {b} years older. "
            f"In {c} years, what will the sum of their ages be?",
            [f"The brother is {a} plus {b}, which is {a + b} years old now.",
             f"Right now their ages add up to {a} plus {a + b}, which is {2 * a + b}.",
             f"In {c} years they both get {c} years older, so that adds {2 * c}, giving {total}."], total)


def _reading(r: random.Random):
    n, p = r.choice(NAMES)
    a, b = r.randint(8, 30), r.randint(3, 9)
    c = a * b + r.randint(10, 120)
    return (f"{n}'s book has {c} pages. {p.capitalize()} reads {a} pages a day for {b} days. "
            f"How many pages are left to read?",
            [f"In {b} days {p} reads {a} times {b}, which is {a * b} pages.",
             f"So {c} minus {a * b} leaves {c - a * b} pages."], c - a * b)


def _class(r: random.Random):
    total, girls = r.randint(20, 40), 0
    while (total - girls) % 2 or girls == 0:
        girls = r.randint(5, total - 5)
    boys = total - girls
    return (f"A class has {total} students and {girls} of them are girls. Half of the boys play soccer. "
            f"How many boys play soccer?",
            [f"The boys are {total} minus {girls}, which is {boys}.",
             f"Half of {boys} is {boys // 2}."], boys // 2)


def _garden(r: random.Random):
    a, b = r.randint(3, 12), r.randint(4, 12)
    c, d = r.randint(1, a * b // 2), r.randint(2, 20)
    ans = a * b - c + d
    return (f"A garden has {a} rows with {b} tulips in each row. {c} tulips wilt and are pulled out, "
            f"then {d} new tulips are planted. How many tulips are in the garden now?",
            [f"At first there are {a} times {b}, which is {a * b} tulips.",
             f"Pulling out {c} leaves {a * b - c}.",
             f"Planting {d} more gives {a * b - c} plus {d}, which is {ans}."], ans)


GENERATORS: list[Gen] = [_boxes, _shopping, _savings, _sharing, _ages, _reading, _class, _garden]


def _submission(r: random.Random, steps: list[str], answer: int) -> tuple[str, str]:
    """A student's work: the right answer, or (half the time) a slip in the last step."""
    if r.random() < 0.5:
        return "\n".join(steps + [f"Answer: {answer}"]), str(answer)
    wrong = answer + r.choice([-10, -2, -1, 1, 2, 10])
    wrong = wrong if wrong >= 0 else answer + 1
    return "\n".join(steps[:-1] + [f"Then I got {wrong}.", f"Answer: {wrong}"]), str(wrong)


def _generate(seed: int, n: int, prefix: str, exclude: set[str] = frozenset()) -> list[Problem]:
    r, out, seen = random.Random(seed), [], set(exclude)
    while len(out) < n:
        question, steps, answer = r.choice(GENERATORS)(r)
        if question in seen:
            continue
        seen.add(question)
        work, given = _submission(r, steps, answer)
        out.append(Problem(f"{prefix}-{len(out):04d}", question, str(answer), tuple(steps), work, given))
    return out


def generated(split: str = "train", n: int = 200, n_heldout: int = 40) -> list[Problem]:
    """The bundled generated set; 'heldout' never repeats a 'train' question."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    train = _generate(TRAIN_SEED, n, "gen")
    if split == "train":
        return train
    return _generate(HELDOUT_SEED, n_heldout, "gen-heldout", {p.question for p in train})


_CALC = re.compile(r"<<[^>]*>>")


def _records(path: Path) -> list[tuple[int, Any]]:
    """(1-based position, parsed record) pairs from a JSONL file or a .json list (GSM8K.json)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read problems file {path}: {e}") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json problems file holds a list of records")
        return list(enumerate(data, 1))
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((n, json.loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a GSM8K-style record ({e})") from None
    return out


def from_jsonl(path: str | Path, split: str = "train") -> list[Problem]:
    """GSM8K-style records (JSONL lines, or a .json list): {"question", "answer": "steps...\n####
    42"}; optional "student_work" and "student_answer" (otherwise a submission is made up, seeded
    by the record's index). Record i is held out when i % 5 == 4."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    path = Path(path)
    out = []
    for i, (n, rec) in enumerate(_records(path)):
        if (i % 5 == 4) != (split == "heldout"):
            continue
        try:
            question, full = str(rec["question"]), str(rec["answer"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a GSM8K-style record (missing {e})") from None
        body, sep, final = full.rpartition("####")
        if not sep or not final.strip():
            raise ValueError(f"{path}:{n}: answer has no '#### <number>' line")
        answer = final.strip().replace(",", "")
        steps = [s.strip() for s in _CALC.sub("", body).splitlines() if s.strip()]
        if "student_answer" in rec:
            given = str(rec["student_answer"])
            work = str(rec.get("student_work") or f"Answer: {given}")
        else:
            try:
                whole = float(answer).is_integer()
            except ValueError:
                whole = False
            if whole:
                work, given = _submission(random.Random(i), steps, int(float(answer)))
            else:  # a non-integer answer: the made-up student gets it right
                work, given = "\n".join(steps + [f"Answer: {answer}"]), answer
        out.append(Problem(f"{path.stem}-{i}", question, answer, tuple(steps), work, given))
    return out


def load_problems(source: str | Path = "generated", split: str = "train") -> list[Problem]:
    """'generated' (the bundled set) or a path to a GSM8K-style JSONL file."""
    return generated(split) if str(source) == "generated" else from_jsonl(source, split)
