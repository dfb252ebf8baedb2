"""minigraph: a small graph library (directed or undirected, weighted edges)."""
from minigraph.graph import Graph, NoPath

__all__ = ["Graph", "NoPath"]
