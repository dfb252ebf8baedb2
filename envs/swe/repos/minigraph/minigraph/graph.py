"""Adjacency-map graphs with traversal, shortest paths, components and ordering."""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterator


class NoPath(LookupError):
    """There is no path between the two nodes."""


class Graph:
    def __init__(self, directed: bool = False) -> None:
        self.directed = directed
        self._adj: dict[Hashable, dict[Hashable, float]] = {}

    def add_node(self, node: Hashable) -> None:
        self._adj.setdefault(node, {})

    def add_edge(self, u: Hashable, v: Hashable, weight: float = 1.0) -> None:
        if weight < 0:
            raise ValueError("negative edge weights are not supported")
        self.add_node(u)
        self.add_node(v)
        self._adj[u][v] = weight
        if not self.directed:
            self._adj[v][u] = weight

    def remove_node(self, node: Hashable) -> None:
        if node not in self._adj:
            raise KeyError(node)
        del self._adj[node]
        for edges in self._adj.values():
            edges.pop(node, None)

    def nodes(self) -> list[Hashable]:
        return list(self._adj)

    def neighbors(self, node: Hashable) -> list[Hashable]:
        return list(self._adj[node])

    def __contains__(self, node: Hashable) -> bool:
        return node in self._adj

    def __len__(self) -> int:
        return len(self._adj)

    def bfs(self, start: Hashable) -> Iterator[Hashable]:
        seen = {start}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            yield node
            for nxt in self._adj[node]:
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)

    def shortest_path(self, source: Hashable, target: Hashable) -> tuple[float, list[Hashable]]:
        """(total weight, nodes from source to target) by Dijkstra; NoPath if unreachable."""
        if source not in self._adj or target not in self._adj:
            raise KeyError(source if source not in self._adj else target)
        dist = {source: 0.0}
        prev: dict[Hashable, Hashable] = {}
        heap = [(0.0, 0, source)]
        counter = 1  # tie-breaker: nodes need not be comparable
        done = set()
        while heap:
            d, _, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            if u == target:
                break
            for v, w in self._adj[u].items():
                nd = d + w
                if nd < dist.get(v, float("inf")):
                    dist[v] = nd
                    prev[v] = u
                    heapq.heappush(heap, (nd, counter, v))
                    counter += 1
        if target not in done:
            raise NoPath(f"no path from {source!r} to {target!r}")
        path = [target]
        while path[-1] != source:
            path.append(prev[path[-1]])
        path.reverse()
        return dist[target], path

    def connected_components(self) -> list[set[Hashable]]:
        """Components of an undirected graph (weakly connected ones for a directed graph)."""
        undirected: dict[Hashable, set[Hashable]] = {n: set(e) for n, e in self._adj.items()}
        for u, edges in self._adj.items():
            for v in edges:
                undirected[v].add(u)
        seen: set[Hashable] = set()
        out = []
        for node in self._adj:
            if node in seen:
                continue
            comp = {node}
            stack = [node]
            while stack:
                for nxt in undirected[stack.pop()]:
                    if nxt not in comp:
                        comp.add(nxt)
                        stack.append(nxt)
            seen |= comp
            out.append(comp)
        return out

    def topological_sort(self) -> list[Hashable]:
        """Kahn's algorithm; ValueError if the directed graph has a cycle."""
        if not self.directed:
            raise ValueError("topological order needs a directed graph")
        indegree = {n: 0 for n in self._adj}
        for edges in self._adj.values():
            for v in edges:
                indegree[v] += 1
        ready = deque(n for n, k in indegree.items() if k == 0)
        order = []
        while ready:
            node = ready.popleft()
            order.append(node)
            for v in self._adj[node]:
                indegree[v] -= 1
                if indegree[v] == 0:
                    ready.append(v)
        if len(order) != len(self._adj):
            raise ValueError("the graph has a cycle")
        return order

    def has_cycle(self) -> bool:
        if self.directed:
            try:
                self.topological_sort()
                return False
            except ValueError:
                return True
        seen: set[Hashable] = set()
        for root in self._adj:
            if root in seen:
                continue
            stack = [(root, None)]
            seen.add(root)
            while stack:
                node, parent = stack.pop()
                for nxt in self._adj[node]:
                    if nxt == parent:
                        continue
                    if nxt in seen:
                        return True
                    seen.add(nxt)
                    stack.append((nxt, node))
        return False
