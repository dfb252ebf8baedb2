from exprcalc import evaluate, tokenize


def test_exponent_notation():
    assert evaluate("1e3 + 1") == 1001.0
    assert evaluate("2.5E-1 * 4") == 1.0


def test_leading_dot():
    assert tokenize(".5") == [("num", 0.5)]
