from inikit import loads


def test_lookup_is_case_insensitive():
    cfg = loads("[a]\nmaxretries = 3\n")
    assert cfg.getint("a", "MaxRetries") == 3


def test_getbool_with_capitalised_key():
    cfg = loads("[a]\ndebug = true\n")
    assert cfg.getbool("a", "Debug") is True
