from minigraph import Graph


def test_topological_sort_keeps_isolated_nodes():
    g = Graph(directed=True)
    g.add_node("standalone")
    g.add_edge("a", "b")
    order = g.topological_sort()
    assert sorted(order) == ["a", "b", "standalone"]
    assert order.index("a") < order.index("b")


def test_isolated_node_is_not_a_cycle():
    g = Graph(directed=True)
    g.add_node("z")
    g.add_edge(1, 2)
    assert not g.has_cycle()
