"""A bundled, seeded generator of multi-step math word problems with exact answers.

Problem i of seed s is always the same (its own `random.Random`), so task ids ("gen-00042") are
stable across runs and machines. Each family returns the question, the exact answer (a
Fraction) and Python code that computes it from the question's numbers; the oracle calls the
python tool with that code, then states the answer in \\boxed{}.
"""
from __future__ import annotations

import functools
import random
from fractions import Fraction
from typing import Callable, Sequence

from envs.base import Task
from envs.tool_calls import render_tool_call

NAMES = ["Maya", "Liam", "Aisha", "Kenji", "Sofia", "Omar", "Elena", "Tariq", "Nora", "Diego", "Priya", "Jonas"]
ITEMS = [("notebook", "notebooks"), ("pen", "pens"), ("mug", "mugs"), ("ticket", "tickets"), ("book", "books")]


def format_answer(x: Fraction) -> str:
    """An exact answer as text: an integer, a terminating decimal, or a/b."""
    x = Fraction(x)
    if x.denominator == 1:
        return str(x.numerator)
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d == 1:  # terminates: write it out exactly
        sign, x = ("-", -x) if x < 0 else ("", x)
        whole, frac = divmod(x.numerator, x.denominator)
        digits = ""
        while frac:
            frac *= 10
            q, frac = divmod(frac, x.denominator)
            digits += str(q)
        return f"{sign}{whole}.{digits}"
    return f"{x.numerator}/{x.denominator}"


Problem = tuple[str, Fraction, str]  # question, exact answer, python code computing it


def shopping(r: random.Random) -> Problem:
    name = r.choice(NAMES)
    (a1, a_pl), (b1, b_pl) = r.sample(ITEMS, 2)
    a, b = r.randint(2, 9), r.randint(2, 9)
    p, q = r.randint(2, 15), r.randint(1, 9)
    total = a * p + b * q
    bill = (total // 20 + 1 + r.randint(0, 2)) * 20
    question = (
        f"{name} buys {a} {a_pl} at ${p} each and {b} {b_pl} at ${q} each. "
        f"{name} pays with ${bill}. How many dollars of change does {name} get back?"
    )
    code = f"cost = {a} * {p} + {b} * {q}\nprint({bill} - cost)"
    return question, Fraction(bill - total), code


def fractions_of_tank(r: random.Random) -> Problem:
    d1, d2 = r.choice([3, 4, 5, 6, 8]), r.choice([2, 3, 4, 5])
    n1, n2 = r.randint(1, d1 - 1), r.randint(1, d2 - 1)
    total = d1 * d2 * r.randint(2, 12)
    left = total * (1 - Fraction(n1, d1)) * (1 - Fraction(n2, d2))
    question = (
        f"A water tank holds {total} liters when full. On Monday {n1}/{d1} of the full tank is used. "
        f"On Tuesday {n2}/{d2} of the water that remained is used. How many liters are left in the tank?"
    )
    code = (
        "from fractions import Fraction\n"
        f"left = {total} * (1 - Fraction({n1}, {d1}))\n"
        f"left = left * (1 - Fraction({n2}, {d2}))\n"
        "print(left)"
    )
    return question, left, code


def discount_and_tax(r: random.Random) -> Problem:
    price = r.randint(12, 400)
    off, tax = r.choice([5, 10, 15, 20, 25, 30, 40]), r.choice([4, 5, 6, 8, 10])
    final = Fraction(price) * (100 - off) / 100 * (100 + tax) / 100
    question = (
        f"A jacket costs ${price}. It is on sale for {off}% off, and then a {tax}% sales tax is added "
        f"to the sale price. What is the final price in dollars? Give the exact amount."
    )
    code = (
        "from fractions import Fraction\n"
        f"sale = Fraction({price}) * (100 - {off}) / 100\n"
        f"final = sale * (100 + {tax}) / 100\n"
        "print(float(final), final)"
    )
    return question, final, code


def average_speed(r: random.Random) -> Problem:
    v1, v2 = r.sample([30, 40, 45, 50, 60, 72, 80, 90], 2)
    t1, t2 = r.randint(1, 4), r.randint(1, 4)
    d1, d2 = v1 * t1, v2 * t2
    avg = Fraction(d1 + d2, t1 + t2)
    question = (
        f"A train travels {d1} km at {v1} km/h and then {d2} km at {v2} km/h. "
        f"What is its average speed in km/h for the whole trip?"
    )
    code = (
        "from fractions import Fraction\n"
        f"hours = Fraction({d1}, {v1}) + Fraction({d2}, {v2})\n"
        f"print(({d1} + {d2}) / hours)"
    )
    return question, avg, code


def pipes(r: random.Random) -> Problem:
    a, b = r.sample(range(2, 25), 2)
    together = Fraction(a * b, a + b)
    question = (
        f"One pipe fills a pool in {a} hours and another pipe fills it in {b} hours. "
        f"How many hours does it take to fill the pool with both pipes open?"
    )
    code = f"from fractions import Fraction\nrate = Fraction(1, {a}) + Fraction(1, {b})\nprint(1 / rate)"
    return question, together, code


def linear_equation(r: random.Random) -> Problem:
    while True:
        a, c = r.randint(2, 9), r.randint(2, 12)
        if a != c:
            break
    x = r.randint(-20, 30)
    b = r.randint(1, 40)
    d = (a - c) * x + b  # a*x + b == c*x + d
    then = f"adding {d}" if d >= 0 else f"subtracting {-d}"
    question = (
        f"Multiplying a number by {a} and then adding {b} gives the same result as multiplying it by {c} "
        f"and then {then}. What is the number?"
    )
    code = f"# {a}*x + {b} = {c}*x + ({d})\nfrom fractions import Fraction\nprint(Fraction({d} - {b}, {a} - {c}))"
    return question, Fraction(x), code


def ages(r: random.Random) -> Problem:
    name = r.choice(NAMES)
    child = r.randint(3, 15)
    k = r.randint(2, 5)
    years = r.randint(1, 10)
    parent_then = k * (child + years)
    parent_now = parent_then - years
    question = (
        f"{name} is {parent_now} years old. In {years} years, {name} will be exactly {k} times as old as "
        f"{name}'s child will be then. How old is the child now?"
    )
    code = f"# {parent_now} + {years} = {k} * (c + {years})\nprint(({parent_now} + {years}) / {k} - {years})"
    return question, Fraction(child), code


def averages(r: random.Random) -> Problem:
    n = r.randint(3, 9)
    mean = r.randint(60, 90)
    new = r.randint(40, 100)
    new_mean = Fraction(n * mean + new, n + 1)
    question = (
        f"The average of {n} test scores is {mean}. After one more test the average of all {n + 1} scores "
        f"is {format_answer(new_mean)}. What was the score on the new test?"
    )
    code = f"from fractions import Fraction\nprint({n + 1} * Fraction('{format_answer(new_mean)}') - {n} * {mean})"
    return question, Fraction(new), code


def compound_interest(r: random.Random) -> Problem:
    principal = r.choice([500, 800, 1000, 1200, 2000, 2500, 5000])
    rate = r.choice([2, 3, 4, 5, 6, 8, 10])
    years = r.randint(2, 3)
    interest = principal * (1 + Fraction(rate, 100)) ** years - principal
    question = (
        f"${principal} is put in a savings account that pays {rate}% interest compounded once a year. "
        f"How many dollars of interest has it earned after {years} years? Give the exact amount."
    )
    code = (
        "from fractions import Fraction\n"
        f"balance = {principal} * (1 + Fraction({rate}, 100)) ** {years}\n"
        f"print(float(balance - {principal}), balance - {principal})"
    )
    return question, interest, code


def ratio_split(r: random.Random) -> Problem:
    a, b, c = r.randint(1, 6), r.randint(1, 6), r.randint(1, 6)
    unit = r.randint(2, 30)
    total = (a + b + c) * unit
    names = r.sample(NAMES, 3)
    question = (
        f"{names[0]}, {names[1]} and {names[2]} share ${total} in the ratio {a}:{b}:{c}. "
        f"How many more dollars does {names[0]} get than {names[2]}? (The answer may be negative.)"
    )
    code = f"unit = {total} / ({a} + {b} + {c})\nprint(unit * {a} - unit * {c})"
    return question, Fraction((a - c) * unit), code


FAMILIES: dict[str, Callable[[random.Random], Problem]] = {
    "arithmetic": shopping,
    "fractions": fractions_of_tank,
    "percentages": discount_and_tax,
    "rates": average_speed,
    "work_rates": pipes,
    "algebra": linear_equation,
    "ages": ages,
    "averages": averages,
    "interest": compound_interest,
    "ratios": ratio_split,
}


def check_families(families: Sequence[str] | None) -> tuple[str, ...]:
    """The family names asked for (all when None), checked: an unknown one raises ValueError."""
    names = tuple(FAMILIES) if families is None else tuple(str(f) for f in families)
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"unknown problem families {unknown or '[]'}; choose among {', '.join(FAMILIES)}")
    return names


def make_task(index: int, seed: int = 0, attempt: int = 0, families: tuple[str, ...] = tuple(FAMILIES)) -> Task:
    """Problem `index` of the suite for `seed` (`families` take turns); `attempt` redraws it."""
    family = families[index % len(families)]
    question, answer, code = FAMILIES[family](random.Random((seed * 1_000_003 + index) * 101 + attempt))
    text = format_answer(answer)
    oracle = [
        "I will compute this with Python.\n" + render_tool_call("python", {"code": code}),
        f"The answer is \\boxed{{{text}}}.",
    ]
    return Task(task_id=f"gen-{index:05d}", prompt=question, oracle=oracle, answer=text, meta={"family": family})


@functools.lru_cache(maxsize=8)
def generate(n: int = 500, seed: int = 0, families: tuple[str, ...] = tuple(FAMILIES)) -> tuple[Task, ...]:
    """The first `n` problems for `seed` drawn from `families` in turn, no two alike (a repeat is
    redrawn)."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for i in range(n):
        for attempt in range(100):
            task = make_task(i, seed, attempt, families)
            if task.prompt not in seen:
                break
        seen.add(task.prompt)
        tasks.append(task)
    return tuple(tasks)
