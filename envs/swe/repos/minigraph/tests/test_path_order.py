from minigraph import Graph


def test_path_runs_from_source_to_target():
    g = Graph()
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", "d")
    assert g.shortest_path("a", "d") == (3, ["a", "b", "c", "d"])


def test_directed_path_order():
    g = Graph(directed=True)
    g.add_edge("x", "y", 2)
    assert g.shortest_path("x", "y") == (2, ["x", "y"])
