from exprcalc import evaluate


def test_minus_binds_looser_than_power():
    assert evaluate("-2 ** 2") == -4


def test_minus_on_variable_power():
    assert evaluate("-x ** 2", {"x": 3}) == -9
