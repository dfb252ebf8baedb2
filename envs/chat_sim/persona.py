"""Personas: a simulated user's hidden preferences, phrasings and first message, kept as data.

A persona is one YAML or JSON file (see envs/chat_sim/personas/). Fields:
  name               the persona's id (defaults to the file name)
  role               "student" (asks for a worked solution) or "teacher" (asks for grading
                     comments on a student's submission): picks what the task shows and what
                     the oracle writes
  description        who the user is, in the second person (the LLM user's persona prompt)
  first_message      template of the opening message; fields {question}, {answer},
                     {student_work}, {student_answer}
  satisfied_message  what the user says when every rubric item passes; must contain done_phrase
  done_phrase        the fixed phrase that ends a session (an LLM user is told to say it)
  rewrite_template   how complaints and directives are joined (fields {complaints}, {directives})
  empty_reply        what the user says when the assistant sent nothing
  rubric             list of items: {name, check (default: name), complaint, directive,
                     preference, ...check parameters}; complaint/directive may be a string or a
                     list (the scripted user rotates through a list turn by turn)
"""
from __future__ import annotations

import dataclasses
import json
import string
from pathlib import Path
from typing import Any

import yaml

from envs.chat_sim.rubric import CHECKS, RubricItem

PERSONA_DIR = Path(__file__).parent / "personas"
ROLES = ("student", "teacher")
TEMPLATE_FIELDS = {"question", "answer", "student_work", "student_answer"}
ITEM_KEYS = {"name", "check", "complaint", "directive", "preference"}


class PersonaError(ValueError):
    """A persona file is missing, unreadable or malformed (the message says which and why)."""


@dataclasses.dataclass(frozen=True)
class Persona:
    name: str
    role: str
    description: str
    first_message: str
    satisfied_message: str
    done_phrase: str
    rewrite_template: str
    empty_reply: str
    rubric: tuple[RubricItem, ...]

    def opening(self, ctx: dict[str, Any]) -> str:
        return self.first_message.format(**ctx)


def _phrasings(value: Any, where: str) -> tuple[str, ...]:
    vals = [value] if isinstance(value, str) else value
    if not isinstance(vals, list) or not vals or not all(isinstance(v, str) and v.strip() for v in vals):
        raise PersonaError(f"{where}: needs a non-empty string or list of strings")
    return tuple(vals)


def _template(text: Any, allowed: set[str], where: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise PersonaError(f"{where}: needs a non-empty string")
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as e:
        raise PersonaError(f"{where}: bad template ({e})") from None
    unknown = fields - allowed
    if unknown:
        raise PersonaError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    return text


def _item(raw: Any, where: str) -> RubricItem:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise PersonaError(f"{where}: each rubric item is a mapping with a 'name'")
    check = raw.get("check", raw["name"])
    if check not in CHECKS:
        raise PersonaError(f"{where} ({raw['name']}): unknown check {check!r}; known: {sorted(CHECKS)}")
    for key in ("complaint", "directive"):
        if key not in raw:
            raise PersonaError(f"{where} ({raw['name']}): missing '{key}'")
    directive = _phrasings(raw["directive"], f"{where}.directive")
    return RubricItem(
        name=raw["name"], check=check,
        params={k: v for k, v in raw.items() if k not in ITEM_KEYS},
        complaint=_phrasings(raw["complaint"], f"{where}.complaint"),
        directive=directive,
        preference=str(raw.get("preference") or directive[0]),
    )


def parse_persona(data: Any, default_name: str = "persona") -> Persona:
    """Build a Persona from a parsed YAML/JSON mapping, with a clear error for each defect."""
    if not isinstance(data, dict):
        raise PersonaError(f"{default_name}: a persona file holds a mapping, got {type(data).__name__}")
    name = str(data.get("name") or default_name)
    role = data.get("role")
    if role not in ROLES:
        raise PersonaError(f"{name}: role must be one of {ROLES}, got {role!r}")
    rubric = data.get("rubric")
    if not isinstance(rubric, list) or not rubric:
        raise PersonaError(f"{name}: 'rubric' must be a non-empty list of items")
    items = tuple(_item(r, f"{name}.rubric[{i}]") for i, r in enumerate(rubric))
    if len({it.name for it in items}) != len(items):
        raise PersonaError(f"{name}: rubric item names must be unique")
    done = data.get("done_phrase")
    if not isinstance(done, str) or not done.strip():
        raise PersonaError(f"{name}: 'done_phrase' must be a non-empty string")
    satisfied = _template(data.get("satisfied_message", done), set(), f"{name}.satisfied_message")
    if done not in satisfied:
        raise PersonaError(f"{name}: satisfied_message must contain done_phrase {done!r}")
    return Persona(
        name=name, role=role,
        description=str(data.get("description") or f"You are a {role}."),
        first_message=_template(data.get("first_message"), TEMPLATE_FIELDS, f"{name}.first_message"),
        satisfied_message=satisfied, done_phrase=done,
        rewrite_template=_template(data.get("rewrite_template", "{complaints} {directives}"),
                                   {"complaints", "directives"}, f"{name}.rewrite_template"),
        empty_reply=str(data.get("empty_reply") or "You didn't send anything. Please answer."),
        rubric=items,
    )


def load_persona(spec: str | Path | Persona) -> Persona:
    """A persona by bundled name ("student"), or by path to a .yaml/.yml/.json file."""
    if isinstance(spec, Persona):
        return spec
    path = Path(spec)
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        matches = [p for p in sorted(PERSONA_DIR.glob(f"{spec}.*")) if p.suffix in (".yaml", ".yml", ".json")]
        if not matches:
            raise PersonaError(f"no bundled persona {str(spec)!r}; bundled: {bundled_personas()}")
        path = matches[0]
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PersonaError(f"cannot read persona file {path}: {e}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise PersonaError(f"persona file {path} does not parse: {e}") from None
    return parse_persona(data, default_name=path.stem)


def bundled_personas() -> list[str]:
    return sorted(p.stem for p in PERSONA_DIR.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
