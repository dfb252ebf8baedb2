"""The `edit` tool (view / create / replace a unique string) on a sandbox's files, and the
scripted oracle that turns a unified diff into edit calls.

Errors the agent caused (missing file, string not found or not unique, a folder given as a
file) come back as `EditError` with a message for the agent; SandboxError passes through.
"""
from __future__ import annotations

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


def oracle_edits(patch: str) -> list[dict[str, Any]]:
    """Edit-tool arguments that make the same change as `patch`: one str_replace per hunk
    (context + removed lines -> context + added lines), a create per added file."""
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
            old = "".join(line.value for line in hunk if not line.is_added)
            new = "".join(line.value for line in hunk if not line.is_removed)
            calls.append({"command": "str_replace", "path": f.path, "old_str": old, "new_str": new})
    return calls
