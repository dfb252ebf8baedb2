"""Bug candidates for one Python source file: one small AST-located change inside one function
(the SWE-smith recipe). Each mutant edits the source text at the node's position only, so its
diff against the original is the one changed token or line, not a reformatted file.

Kinds: `compare` (< <=, > >=, == !=, in / not in, is / is not swapped), `arith` (+ -, * //,
/ *, % //), `bool` (and / or), `off_by_one` (an integer constant, a slice bound or a range
argument n -> n+1 or n-1), `constant` (True / False swapped, a non-empty string emptied),
`drop_if` (an `if` without `else` removed), `swap_return` (a returned tuple reversed, or the
branches of a returned `x if c else y` swapped).
"""
from __future__ import annotations

import ast
import dataclasses

_COMPARE = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==",
            ast.In: "not in", ast.NotIn: "in", ast.Is: "is not", ast.IsNot: "is"}
_COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                 ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_ARITH = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"), ast.FloorDiv: ("//", "*"),
          ast.Div: ("/", "*"), ast.Mod: ("%", "//")}


@dataclasses.dataclass(frozen=True)
class Mutant:
    path: str        # the file, relative to the repository
    function: str    # qualified name: Class.method or function
    kind: str
    line: int        # where the change is (1-based, original file)
    text: str        # the whole mutated file


class _Source:
    """The file as lines, and offsets of (line, col) positions in it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for line in text.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.lines = text.splitlines(keepends=True)

    def offset(self, line: int, col: int) -> int:
        # ast columns are UTF-8 byte offsets
        return self.starts[line - 1] + len(self.lines[line - 1].encode()[:col].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def replace(self, start: int, end: int, new: str) -> str:
        return self.text[:start] + new + self.text[end:]


def _op_between(src: _Source, left: ast.AST, right: ast.AST, old: str, new: str) -> str | None:
    """The text with the operator token `old` between two operands replaced by `new`."""
    a, b = src.span(left)[1], src.span(right)[0]
    gap = src.text[a:b]
    at = gap.find(old)
    if at < 0 or gap.count(old) != 1:
        return None
    return src.replace(a + at, a + at + len(old), new)


def _changes(src: _Source, node: ast.AST) -> list[tuple[str, int, str]]:
    """(kind, line, mutated text) for one node."""
    out: list[tuple[str, int, str]] = []
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            text = _op_between(src, operands[i], operands[i + 1], _COMPARE_TEXT[type(op)], _COMPARE[type(op)])
            if text:
                out.append(("compare", node.lineno, text))
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        old, new = _ARITH[type(node.op)]
        if not (isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
            text = _op_between(src, node.left, node.right, old, new)  # not "%"-formatting
            if text:
                out.append(("arith", node.lineno, text))
    elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        text = _op_between(src, node.values[0], node.values[1], old, new)
        if text:
            out.append(("bool", node.lineno, text))
    elif isinstance(node, ast.Constant) and node.end_lineno == node.lineno:
        start, end = src.span(node)
        literal = src.text[start:end]
        if isinstance(node.value, bool):
            out.append(("constant", node.lineno, src.replace(start, end, str(not node.value))))
        elif isinstance(node.value, int) and literal.isdigit():
            for n in (node.value + 1, node.value - 1):
                if n >= 0:
                    out.append(("off_by_one", node.lineno, src.replace(start, end, str(n))))
        elif isinstance(node.value, str) and node.value and literal[:1] in "'\"" and literal[1:2] != literal[:1]:
            out.append(("constant", node.lineno, src.replace(start, end, literal[0] * 2)))
    elif isinstance(node, ast.If) and not node.orelse:
        first = src.lines[node.lineno - 1]
        indent = len(first) - len(first.lstrip())
        if first.lstrip().startswith("if ") and node.col_offset == indent:
            start, end = src.starts[node.lineno - 1], src.starts[node.end_lineno]
            out.append(("drop_if", node.lineno, src.replace(start, end, "")))
    elif isinstance(node, ast.Return) and node.value is not None:
        value = node.value
        if isinstance(value, ast.Tuple) and len(value.elts) >= 2:
            parts = [src.text[slice(*src.span(e))] for e in value.elts]
            start, end = src.span(value.elts[0])[0], src.span(value.elts[-1])[1]
            if len(set(parts)) > 1:
                out.append(("swap_return", node.lineno, src.replace(start, end, ", ".join(reversed(parts)))))
        elif isinstance(value, ast.IfExp):
            body, orelse = src.text[slice(*src.span(value.body))], src.text[slice(*src.span(value.orelse))]
            (b0, b1), (o0, o1) = src.span(value.body), src.span(value.orelse)
            if body != orelse:
                text = src.text[:b0] + orelse + src.text[b1:o0] + body + src.text[o1:]
                out.append(("swap_return", node.lineno, text))
    return out


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of every function and method, outer ones first."""
    found: list[tuple[str, ast.AST]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((prefix + node.name, node))
            found += _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, prefix + node.name + ".")
    return found


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function's body, not of the functions or classes nested in it, nor its
    docstring."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    out, todo = [], body
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.JoinedStr):  # f-string pieces carry no bug worth finding
            continue
        out.append(node)
        todo += list(ast.iter_child_nodes(node))
    return out


def mutants(path: str, text: str) -> dict[str, list[Mutant]]:
    """{qualified function name: its mutants} of one file, in source order; each mutant compiles
    and differs from the original. A file that does not parse has none."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    src = _Source(text)
    found: dict[str, list[Mutant]] = {}
    for name, fn in _functions(tree):
        seen: set[str] = set()
        for node in _own_nodes(fn):
            for kind, line, new in _changes(src, node):
                if new == text or new in seen:
                    continue
                try:
                    compile(new, path, "exec")
                except SyntaxError:  # e.g. an if that was its block's only statement
                    continue
                seen.add(new)
                found.setdefault(name, []).append(Mutant(path, name, kind, line, new))
    return found
