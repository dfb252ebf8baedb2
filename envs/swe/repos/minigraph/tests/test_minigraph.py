import pytest

from minigraph import Graph, NoPath


def make_line():
    g = Graph()
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    return g


def test_nodes_and_neighbors():
    g = make_line()
    assert sorted(g.nodes()) == ["a", "b", "c"]
    assert sorted(g.neighbors("b")) == ["a", "c"]


def test_directed_edges_are_one_way():
    g = Graph(directed=True)
    g.add_edge(1, 2)
    assert g.neighbors(2) == []


def test_bfs_order():
    assert list(make_line().bfs("a")) == ["a", "b", "c"]


def test_shortest_path_direct_edge():
    g = Graph()
    g.add_edge("a", "b", 5)
    assert g.shortest_path("a", "b")[0] == 5


def test_no_path():
    g = Graph()
    g.add_node("x")
    g.add_node("y")
    with pytest.raises(NoPath):
        g.shortest_path("x", "y")


def test_components():
    g = make_line()
    g.add_edge("x", "y")
    assert sorted(map(sorted, g.connected_components())) == [["a", "b", "c"], ["x", "y"]]


def test_topological_sort_chain():
    g = Graph(directed=True)
    g.add_edge("shirt", "tie")
    g.add_edge("tie", "jacket")
    assert g.topological_sort() == ["shirt", "tie", "jacket"]


def test_directed_cycle():
    g = Graph(directed=True)
    g.add_edge(1, 2)
    g.add_edge(2, 1)
    assert g.has_cycle()


def test_undirected_triangle_has_cycle():
    g = make_line()
    g.add_edge("c", "a")
    assert g.has_cycle()


def test_negative_weight_rejected():
    with pytest.raises(ValueError):
        Graph().add_edge(1, 2, -1)
