"""The `edit` tool (view / create / replace a unique string) on a sandbox's files, and the
scripted oracle: a unified diff as edit calls (`oracle_edits`), inside the workflow a model can
imitate (`oracle_workflow`: run the failing tests, look at the code, edit, test again, submit).

Errors the agent caused (missing file, string not found or not unique, a folder given as a
file) come back as `EditError` with a message for the agent; SandboxError passes through.
"""
from __future__ import annotations

import json
import posixpath
from shlex import quote as bash_quote
from typing import Any

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from envs.sandbox import Sandbox

COMMANDS = ("view", "create", "str_replace")
MAX_FILE_BYTES = 2 * 1024 * 1024
_TMP = "/tmp/openclaw-swe/edit.tmp"


class EditError(Exception):
    """The edit could not be done; the message is for the agent."""


def _path(path: Any, root: str) -> str:
    if not isinstance(path, str) or not path.strip():
        raise EditError('"path" must be a non-empty string')
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(root, path))


def _read(sb: Sandbox, path: str) -> str:
    try:
        blob = sb.read_file(path, max_bytes=MAX_FILE_BYTES)
    except FileNotFoundError:
        raise EditError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise EditError(f"{path} is a folder; use bash (ls) to list it") from None
    except ValueError as e:
        raise EditError(str(e)) from None
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError:
        raise EditError(f"{path} is not UTF-8 text") from None


def _write(sb: Sandbox, path: str, text: str) -> None:
    """Write through `cat >` so an existing file keeps its mode and owner."""
    sb.write_file(_TMP, text)
    r = sb.exec(f"cat {_TMP} > {bash_quote(path)}; rc=$?; rm -f {_TMP}; exit $rc", timeout=30)
    if not r.ok:
        raise EditError(f"cannot write {path}: {(r.stdout + r.stderr).strip()[-300:]}")


def run_edit(sb: Sandbox, args: dict[str, Any], root: str) -> str:
    """Carry out one edit call; returns the text the agent sees."""
    cmd = args.get("command")
    if cmd not in COMMANDS:
        raise EditError(f'"command" must be one of {", ".join(COMMANDS)}; got {cmd!r}')
    path = _path(args.get("path"), root)
    if cmd == "view":
        lines = _read(sb, path).splitlines()
        return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(lines, 1)) or f"({path} is empty)"
    if cmd == "create":
        text = args.get("file_text")
        if not isinstance(text, str):
            raise EditError('create needs a string "file_text"')
        if sb.exec(f"test -e {bash_quote(path)}", timeout=10).exit_code == 0:
            raise EditError(f"{path} already exists; use str_replace to change it")
        sb.exec(f"mkdir -p -- {bash_quote(posixpath.dirname(path))}", timeout=10)
        _write(sb, path, text)
        return f"Created {path} ({len(text.splitlines())} lines)."
    old, new = args.get("old_str"), args.get("new_str", "")
    if not isinstance(old, str) or not old:
        raise EditError('str_replace needs a non-empty string "old_str"')
    if not isinstance(new, str):
        raise EditError('"new_str" must be a string')
    text = _read(sb, path)
    count = text.count(old)
    if count == 0:
        raise EditError(f"old_str was not found in {path} (it must match exactly, whitespace included)")
    if count > 1:
        raise EditError(f"old_str occurs {count} times in {path}; include more context so it is unique")
    _write(sb, path, text.replace(old, new))
    line = text[: text.index(old)].count("\n") + 1
    return f"Edited {path}: replaced {len(old.splitlines())} line(s) at line {line} with {len(new.splitlines())}."


def oracle_edits(patch: str, context: int | None = None) -> list[dict[str, Any]]:
    """Edit-tool arguments that make the same change as `patch`: one str_replace per hunk
    (context + removed lines -> context + added lines), a create per added file. `context`:
    keep at most that many context lines on each side of a hunk's change (a shorter call; it must
    still be unique in the file)."""
    calls: list[dict[str, Any]] = []
    try:
        files = PatchSet(patch)
    except UnidiffParseError as e:
        raise ValueError(f"the gold patch is not a readable unified diff: {e}") from None
    for f in files:
        if f.is_added_file:
            text = "".join(line.value for hunk in f for line in hunk if line.is_added)
            calls.append({"command": "create", "path": f.path, "file_text": text})
            continue
        if f.is_removed_file or f.is_binary_file:
            raise ValueError(f"the edit oracle cannot express {f.path} (removed or binary file)")
        for hunk in f:
            lines = list(hunk)
            if context is not None:
                changed = [i for i, line in enumerate(lines) if not line.is_context]
                lines = lines[max(0, changed[0] - context): changed[-1] + 1 + context] if changed else lines
            old = "".join(line.value for line in lines if not line.is_added)
            new = "".join(line.value for line in lines if not line.is_removed)
            calls.append({"command": "str_replace", "path": f.path, "old_str": old, "new_str": new})
    return calls


SHOWN_TESTS = 3      # failing tests the oracle runs by name
CONTEXT_LINES = 3    # lines shown around a hunk
EDIT_CONTEXT = 1     # context lines each side of a str_replace: a call a model writes within its token budget


def oracle_workflow(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) calls that fix `record` the way an engineer would: run the failing tests
    (those already in the repository, else the whole suite), show the lines of each hunk with
    their numbers, replace them (`oracle_edits`), run the tests again, submit. ValueError for a
    patch the edit tool cannot express."""
    edits = oracle_edits(record["patch"], context=EDIT_CONTEXT)
    touched = {f.path for f in PatchSet(record.get("test_patch") or "")}  # not in the repository before it
    f2p = record.get("FAIL_TO_PASS") or []
    f2p = json.loads(f2p) if isinstance(f2p, str) else list(f2p)
    present = [t for t in f2p if t.split("::", 1)[0] not in touched][:SHOWN_TESTS]
    test = {"command": " ".join(["python3 -m pytest -q --tb=line -p no:cacheprovider", *map(bash_quote, present)])
                       + " 2>&1 | tail -n 15"}
    calls: list[tuple[str, dict[str, Any]]] = [("bash", test)]
    for f in PatchSet(record["patch"]):
        for hunk in f if not f.is_added_file else []:
            first = max(1, hunk.source_start - CONTEXT_LINES)
            last = hunk.source_start + hunk.source_length + CONTEXT_LINES
            calls.append(("bash", {"command": f"cat -n {bash_quote(f.path)} | sed -n '{first},{last}p'"}))
    calls += [("edit", e) for e in edits]
    return calls + [("bash", test), ("submit", {})]
