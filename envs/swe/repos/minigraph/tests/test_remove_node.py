from minigraph import Graph


def test_remove_node_drops_incoming_edges():
    g = Graph(directed=True)
    g.add_edge("a", "b")
    g.add_edge("c", "b")
    g.remove_node("b")
    assert g.neighbors("a") == []
    assert g.neighbors("c") == []


def test_bfs_after_removal():
    g = Graph(directed=True)
    g.add_edge(1, 2)
    g.add_edge(3, 2)
    g.remove_node(2)
    assert list(g.bfs(1)) == [1]
