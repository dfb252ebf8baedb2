from inikit import dumps, loads


def test_defaults_survive_a_round_trip():
    cfg = loads("timeout = 5\n[a]\nk = v\n")
    again = loads(dumps(cfg))
    assert again.getint("a", "timeout") == 5


def test_dump_writes_default_section_first():
    text = dumps(loads("timeout = 5\n[a]\nk = v\n"))
    assert text.splitlines()[0] == "[DEFAULT]"
