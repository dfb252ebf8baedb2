import pytest

from exprcalc import EvalError, evaluate


def test_division_by_zero_is_an_eval_error():
    with pytest.raises(EvalError, match="division by zero"):
        evaluate("1 / (2 - 2)")


def test_modulo_by_zero_is_an_eval_error():
    with pytest.raises(EvalError):
        evaluate("5 % 0")
