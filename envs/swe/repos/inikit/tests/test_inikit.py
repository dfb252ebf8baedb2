import pytest

from inikit import ParseError, dumps, loads

SAMPLE = """
; a comment
[server]
host = example.org
port = 8080
debug = false

[paths]
root = /srv
"""


def test_sections():
    assert loads(SAMPLE).section_names() == ["server", "paths"]


def test_get_values():
    cfg = loads(SAMPLE)
    assert cfg.get("server", "host") == "example.org"
    assert cfg.getint("server", "port") == 8080


def test_getbool_false():
    assert loads(SAMPLE).getbool("server", "debug") is False


def test_fallback():
    assert loads(SAMPLE).get("server", "missing", "x") == "x"


def test_hash_comment():
    assert loads("# hi\n[a]\nk = v\n").get("a", "k") == "v"


def test_continuation_lines():
    cfg = loads("[a]\nmotd = hello\n  world\n")
    assert cfg.get("a", "motd") == "hello\nworld"


def test_defaults_are_inherited():
    cfg = loads("timeout = 5\n[a]\nk = v\n")
    assert cfg.getint("a", "timeout") == 5


def test_bad_line():
    with pytest.raises(ParseError):
        loads("[a]\njust words\n")


def test_unterminated_header():
    with pytest.raises(ParseError):
        loads("[a\n")


def test_round_trip():
    cfg = loads(SAMPLE)
    assert loads(dumps(cfg)).sections == cfg.sections
