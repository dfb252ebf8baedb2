from inikit import loads


def test_repeated_section_merges():
    cfg = loads("[a]\nx = 1\n[b]\ny = 2\n[a]\nz = 3\n")
    assert cfg.get("a", "x") == "1"
    assert cfg.get("a", "z") == "3"
    assert cfg.section_names() == ["a", "b"]
