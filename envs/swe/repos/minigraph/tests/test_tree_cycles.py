from minigraph import Graph


def test_single_edge_is_not_a_cycle():
    g = Graph()
    g.add_edge("a", "b")
    assert not g.has_cycle()


def test_tree_is_not_a_cycle():
    g = Graph()
    for child in "bcd":
        g.add_edge("a", child)
    g.add_edge("b", "e")
    assert not g.has_cycle()
