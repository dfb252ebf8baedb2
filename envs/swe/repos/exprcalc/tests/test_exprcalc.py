import pytest

from exprcalc import EvalError, evaluate, tokenize


def test_integers():
    assert evaluate("1 + 2 * 3") == 7


def test_parentheses():
    assert evaluate("(1 + 2) * 3") == 9


def test_variables():
    assert evaluate("x * y + 1", {"x": 3, "y": 4}) == 13


def test_functions():
    assert evaluate("max(1, 5, 3) + abs(-2)") == 7


def test_float_division():
    assert evaluate("7 / 2") == 3.5


def test_floor_division_and_modulo():
    assert evaluate("7 // 2") == 3
    assert evaluate("7 % 4") == 3


def test_simple_power():
    assert evaluate("2 ** 10") == 1024


def test_tokenize_decimal():
    assert tokenize("3.25 + x") == [("num", 3.25), ("op", "+"), ("name", "x")]


def test_unbalanced_parenthesis():
    with pytest.raises(EvalError):
        evaluate("(1 + 2")


def test_unknown_function():
    with pytest.raises(EvalError):
        evaluate("foo(1)")
