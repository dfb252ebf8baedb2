from exprcalc import evaluate


def test_power_is_right_associative():
    assert evaluate("2 ** 3 ** 2") == 512


def test_power_with_negative_exponent():
    assert evaluate("2 ** -1") == 0.5
