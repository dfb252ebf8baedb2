"""Tokenizer, recursive-descent parser and evaluator for arithmetic expressions.

Grammar (Python's precedence):
    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "//" | "%") unary)*
    unary  := ("-" | "+") unary | power
    power  := atom ("**" unary)?
    atom   := NUMBER | NAME | NAME "(" expr ("," expr)* ")" | "(" expr ")"
"""
from __future__ import annotations

import math
import re
from typing import Any

FUNCTIONS = {"abs": abs, "min": min, "max": max, "sqrt": math.sqrt, "round": round}
_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|([A-Za-z_]\w*)|(\*\*|//|[-+*/%(),]))")


class EvalError(ValueError):
    """The expression is malformed or cannot be evaluated."""


def tokenize(text: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise EvalError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos}")
        number, name, op = m.groups()
        if number is not None:
            tokens.append(("num", float(number) if any(c in number for c in ".eE") else int(number)))
        elif name is not None:
            tokens.append(("name", name))
        else:
            tokens.append(("op", op))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, Any]]):
        self.tokens = tokens
        self.i = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, op: str | None = None) -> tuple[str, Any]:
        tok = self.peek()
        if tok is None:
            raise EvalError("unexpected end of expression")
        if op is not None and tok != ("op", op):
            raise EvalError(f"expected {op!r}, found {tok[1]!r}")
        self.i += 1
        return tok

    def at(self, *ops: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in ops

    def expr(self) -> tuple:
        node = self.term()
        while self.at("+", "-"):
            op = self.take()[1]
            node = ("bin", op, node, self.term())
        return node

    def term(self) -> tuple:
        node = self.unary()
        while self.at("*", "/", "//", "%"):
            op = self.take()[1]
            node = ("bin", op, node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.at("-", "+"):
            op = self.take()[1]
            return ("neg", self.unary()) if op == "-" else self.unary()
        return self.power()

    def power(self) -> tuple:
        node = self.atom()
        if self.at("**"):
            self.take()
            node = ("bin", "**", node, self.unary())
        return node

    def atom(self) -> tuple:
        kind, value = self.take()
        if kind == "num":
            return ("num", value)
        if kind == "name":
            if self.at("("):
                self.take("(")
                args = [self.expr()]
                while self.at(","):
                    self.take(",")
                    args.append(self.expr())
                self.take(")")
                return ("call", value, args)
            return ("var", value)
        if value == "(":
            node = self.expr()
            self.take(")")
            return node
        raise EvalError(f"unexpected {value!r}")


def parse(text: str) -> tuple:
    """The syntax tree of `text` (nested tuples)."""
    p = _Parser(tokenize(text))
    if p.peek() is None:
        raise EvalError("empty expression")
    node = p.expr()
    if p.peek() is not None:
        raise EvalError(f"unexpected {p.peek()[1]!r} after the end of the expression")
    return node


def _apply(op: str, a: Any, b: Any) -> Any:
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        if op == "//":
            return a // b
        if op == "%":
            return a % b
        return a ** b
    except ZeroDivisionError:
        raise EvalError("division by zero") from None


def _eval(node: tuple, env: dict[str, Any]) -> Any:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        if node[1] not in env:
            raise EvalError(f"undefined variable {node[1]!r}")
        return env[node[1]]
    if kind == "neg":
        return -_eval(node[1], env)
    if kind == "call":
        fn = FUNCTIONS.get(node[1])
        if fn is None:
            raise EvalError(f"unknown function {node[1]!r}")
        return fn(*(_eval(a, env) for a in node[2]))
    return _apply(node[1], _eval(node[2], env), _eval(node[3], env))


def evaluate(text: str, variables: dict[str, Any] | None = None) -> Any:
    """Evaluate `text` with the given variables."""
    return _eval(parse(text), dict(variables or {}))
