from inikit import loads


def test_url_value_keeps_its_colons():
    cfg = loads("[web]\nurl = http://example.org:8080/\n")
    assert cfg.get("web", "url") == "http://example.org:8080/"


def test_time_value():
    cfg = loads("[cron]\nat = 12:30\n")
    assert cfg.get("cron", "at") == "12:30"
