"""exprcalc: a safe arithmetic expression evaluator (no eval())."""
from exprcalc.evaluator import EvalError, evaluate, parse, tokenize

__all__ = ["EvalError", "evaluate", "parse", "tokenize"]
