from minigraph import Graph


def test_takes_the_lighter_longer_route():
    g = Graph(directed=True)
    g.add_edge("s", "t", 10)
    g.add_edge("s", "a", 1)
    g.add_edge("a", "b", 1)
    g.add_edge("b", "t", 1)
    assert g.shortest_path("s", "t") == (3, ["s", "a", "b", "t"])


def test_updates_a_node_seen_first_through_a_heavy_edge():
    g = Graph()
    g.add_edge(1, 2, 7)
    g.add_edge(1, 3, 2)
    g.add_edge(3, 2, 3)
    g.add_edge(2, 4, 1)
    assert g.shortest_path(1, 4) == (6, [1, 3, 2, 4])
