from exprcalc import evaluate


def test_subtraction_is_left_associative():
    assert evaluate("10 - 3 - 2") == 5


def test_mixed_addition_and_subtraction():
    assert evaluate("1 - 2 + 3") == 2
