from inikit import loads


def test_yes_and_on_are_true():
    cfg = loads("[f]\na = yes\nb = On\n")
    assert cfg.getbool("f", "a") is True
    assert cfg.getbool("f", "b") is True


def test_no_and_off_are_false():
    cfg = loads("[f]\na = no\nb = OFF\n")
    assert cfg.getbool("f", "a") is False
    assert cfg.getbool("f", "b") is False
