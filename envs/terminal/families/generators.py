"""The task families' generators: each family is a tuple of variants, and a variant turns a seeded
`random.Random` into a `Spec` (the instruction, the setup, a one-line oracle and the checks).

Every answer the checks expect is computed here from the data the setup writes, so the tests
(hidden from the agent until submit) hold it; nothing the agent writes is trusted to state it.
The oracles are single command lines: they are the warm start's demonstrations, short enough for
a small model to learn to write as one bash call.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable

WORDS = (
    "apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "ocean", "candle", "forest", "silver",
    "rocket", "garden", "pepper", "violet", "harbor", "falcon", "marble", "copper", "meadow", "walnut", "lantern",
    "thunder", "orchid", "pebble", "glacier", "saddle", "biscuit", "compass", "velvet", "anchor", "cactus",
    "dolphin", "ember", "feather", "gravel", "hammock", "igloo", "jasmine", "kettle", "ladder", "mango", "nutmeg",
    "oyster", "parrot", "quartz", "raven", "spruce", "tulip",
)
STEMS = ("notes", "data", "words", "items", "names", "fruits", "colors", "input", "records", "list", "animals",
         "tools", "cities", "things", "entries")
CITIES = ("paris", "lima", "oslo", "cairo", "tokyo", "quito", "delhi", "perth", "rome", "seoul")


@dataclasses.dataclass(frozen=True)
class Spec:
    instruction: str
    setup: list[str]  # bash lines run in the work dir before the episode
    solution: str  # one command line: the oracle
    checks: list[dict[str, Any]]  # what tests/check.py asserts (its CHECKS' kinds)


def put(path: str, lines: list[str]) -> str:
    """A setup line writing `lines` to `path` (a quoted here document: nothing in them expands)."""
    return f"cat > {path} <<'__DATA__'\n" + "\n".join(lines) + "\n__DATA__"


def text(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def sentences(r: random.Random, n: int, lo: int = 3, hi: int = 7) -> list[str]:
    return [" ".join(r.choices(WORDS, k=r.randint(lo, hi))) for _ in range(n)]


def files(r: random.Random, k: int = 2) -> list[str]:
    """`k` distinct .txt file names."""
    return [f"{s}.txt" for s in r.sample(STEMS, k)]


def source_and_count(r: random.Random) -> tuple[str, str]:
    """A data file's name, and the name of the file a number goes to."""
    return files(r, 1)[0], r.choice(("count.txt", "total.txt", "result.txt", "answer.txt"))


def numbers(r: random.Random) -> list[str]:
    """Distinct numbers whose text order differs from their numeric order (one below 10, one over 99)."""
    nums = [r.randint(1, 9), r.randint(100, 999)] + r.sample(range(10, 999), r.randint(4, 8))
    r.shuffle(nums)
    return [str(n) for n in dict.fromkeys(nums)]


# ---- sort: the lines of a file in some order --------------------------------------------------
def _sort(flags: str, how: str, key: Callable[[str], Any], reverse: bool, numeric: bool) -> Callable[[random.Random], Spec]:
    def make(r: random.Random) -> Spec:
        src, dst = files(r)
        lines = numbers(r) if numeric else r.choices(WORDS, k=r.randint(6, 12))
        want = sorted(lines, key=key, reverse=reverse)
        return Spec(f"Sort the lines of `{src}` {how} and write the result to `{dst}`.",
                    [put(src, lines)], f"sort {flags}{src} > {dst}", [{"kind": "text", "path": dst, "content": text(want)}])
    return make


SORT = (
    _sort("", "alphabetically", str, False, False),
    _sort("-r ", "in reverse alphabetical order", str, True, False),
    _sort("-n ", "numerically, smallest first", int, False, True),
    _sort("-rn ", "numerically, largest first", int, True, True),
)


# ---- dedupe: repeated lines ----------------------------------------------------------------------
def _repeated(r: random.Random) -> list[str]:
    """Lines of a few words, some of them repeated, in random order."""
    distinct = r.sample(WORDS, r.randint(4, 7))
    lines = distinct + r.choices(distinct[:-1], k=r.randint(4, 9))  # the last word stays single
    r.shuffle(lines)
    return lines


def dedupe_sorted(r: random.Random) -> Spec:
    src, dst = files(r)
    lines = _repeated(r)
    return Spec(f"Write every distinct line of `{src}` exactly once, sorted alphabetically, to `{dst}`.",
                [put(src, lines)], f"sort -u {src} > {dst}", [{"kind": "text", "path": dst, "content": text(sorted(set(lines)))}])


def dedupe_count(r: random.Random) -> Spec:
    src, dst = source_and_count(r)
    lines = _repeated(r)
    return Spec(f"Count how many distinct lines `{src}` has and write just that number to `{dst}`.",
                [put(src, lines)], f"sort -u {src} | wc -l > {dst}", [{"kind": "number", "path": dst, "value": len(set(lines))}])


def dedupe_repeated(r: random.Random) -> Spec:
    src, dst = files(r)
    lines = _repeated(r)
    twice = sorted({x for x in lines if lines.count(x) > 1})
    return Spec(f"Write the lines that occur more than once in `{src}` to `{dst}`, each once, sorted alphabetically.",
                [put(src, lines)], f"sort {src} | uniq -d > {dst}", [{"kind": "text", "path": dst, "content": text(twice)}])


DEDUPE = (dedupe_sorted, dedupe_count, dedupe_repeated)


# ---- count: lines, words, matches, files ------------------------------------------------------------
def count_lines(r: random.Random) -> Spec:
    src, dst = source_and_count(r)
    lines = sentences(r, r.randint(5, 15))
    return Spec(f"Count the lines in `{src}` and write just the number to `{dst}`.",
                [put(src, lines)], f"wc -l < {src} > {dst}", [{"kind": "number", "path": dst, "value": len(lines)}])


def count_words(r: random.Random) -> Spec:
    src, dst = source_and_count(r)
    lines = sentences(r, r.randint(3, 8))
    return Spec(f"Count the words in `{src}` and write just the number to `{dst}`.",
                [put(src, lines)], f"wc -w < {src} > {dst}",
                [{"kind": "number", "path": dst, "value": sum(len(x.split()) for x in lines)}])


def count_matches(r: random.Random) -> Spec:
    src, dst = source_and_count(r)
    lines = sentences(r, r.randint(6, 14))
    word = r.choice(" ".join(lines).split())
    return Spec(f"Count the lines of `{src}` that contain the word `{word}` and write just the number to `{dst}`.",
                [put(src, lines)], f"grep -c {word} {src} > {dst}",
                [{"kind": "number", "path": dst, "value": sum(word in x for x in lines)}])


def count_files(r: random.Random) -> Spec:
    folder, ext, other = r.choice(("logs", "reports", "inbox", "archive")), *r.sample(("log", "csv", "txt", "md", "json"), 2)
    names = r.sample(WORDS, r.randint(4, 10))
    k = r.randint(1, len(names) - 1)
    made = [f"{folder}/{n}.{ext}" for n in names[:k]] + [f"{folder}/{n}.{other}" for n in names[k:]]
    return Spec(f"Count the files in the folder `{folder}/` whose names end in `.{ext}` and write just the number to `count.txt`.",
                [f"mkdir -p {folder} && touch {' '.join(made)}"], f"ls {folder}/*.{ext} | wc -l > count.txt",
                [{"kind": "number", "path": "count.txt", "value": k}])


COUNT = (count_lines, count_words, count_matches, count_files)


# ---- replace: edit text -------------------------------------------------------------------------------
def replace_word(r: random.Random) -> Spec:
    (src,) = files(r, 1)
    old, new = r.sample(WORDS, 2)
    lines = [x if i % 2 else f"{x} {old}" for i, x in enumerate(sentences(r, r.randint(4, 9), 2, 6))]
    return Spec(f"In `{src}`, replace every occurrence of `{old}` with `{new}` (edit the file in place).",
                [put(src, lines)], f"sed -i 's/{old}/{new}/g' {src}",
                [{"kind": "text", "path": src, "content": text(lines).replace(old, new)}])


def delete_lines(r: random.Random) -> Spec:
    (src,) = files(r, 1)
    word = r.choice(WORDS)
    lines = [x if i % 3 else f"{word} {x}" for i, x in enumerate(sentences(r, r.randint(5, 10), 2, 5))]
    return Spec(f"Delete every line of `{src}` that contains `{word}` (edit the file in place).",
                [put(src, lines)], f"sed -i '/{word}/d' {src}",
                [{"kind": "text", "path": src, "content": text([x for x in lines if word not in x])}])


def uppercase(r: random.Random) -> Spec:
    src, dst = files(r)
    lines = sentences(r, r.randint(3, 7))
    return Spec(f"Write the content of `{src}` in upper case to `{dst}`.",
                [put(src, lines)], f"tr a-z A-Z < {src} > {dst}", [{"kind": "text", "path": dst, "content": text(lines).upper()}])


REPLACE = (replace_word, delete_lines, uppercase)


# ---- write: create and extend files --------------------------------------------------------------------
def write_new(r: random.Random) -> Spec:
    (dst,) = files(r, 1)
    line = " ".join(r.sample(WORDS, r.randint(2, 4)))
    return Spec(f"Create the file `{dst}` containing exactly one line: `{line}`",
                [], f"echo '{line}' > {dst}", [{"kind": "text", "path": dst, "content": text([line])}])


def write_append(r: random.Random) -> Spec:
    (dst,) = files(r, 1)
    lines = sentences(r, r.randint(2, 6))
    line = " ".join(r.sample(WORDS, r.randint(2, 4)))
    return Spec(f"Add the line `{line}` to the end of `{dst}`, keeping its other lines.",
                [put(dst, lines)], f"echo '{line}' >> {dst}", [{"kind": "text", "path": dst, "content": text(lines + [line])}])


def write_prepend(r: random.Random) -> Spec:
    (dst,) = files(r, 1)
    lines = sentences(r, r.randint(2, 6))
    line = " ".join(r.sample(WORDS, r.randint(2, 4)))
    return Spec(f"Insert the line `{line}` at the top of `{dst}`, before its other lines.",
                [put(dst, lines)], f"sed -i '1i {line}' {dst}", [{"kind": "text", "path": dst, "content": text([line] + lines)}])


def write_nested(r: random.Random) -> Spec:
    a, b = r.sample(WORDS, 2)
    (name,) = files(r, 1)
    line = " ".join(r.sample(WORDS, r.randint(2, 3)))
    path = f"{a}/{b}/{name}"
    return Spec(f"Create the file `{path}` (and its folders) containing exactly one line: `{line}`",
                [], f"mkdir -p {a}/{b} && echo '{line}' > {path}", [{"kind": "text", "path": path, "content": text([line])}])


WRITE = (write_new, write_append, write_prepend, write_nested)


# ---- extract: parts of a file ---------------------------------------------------------------------------
def _part(which: str) -> Callable[[random.Random], Spec]:
    def make(r: random.Random) -> Spec:
        src, dst = files(r)
        lines = sentences(r, r.randint(8, 14), 2, 5)
        n = r.randint(2, 5)
        part, cmd = (lines[:n], "head") if which == "first" else (lines[-n:], "tail")
        return Spec(f"Write the {which} {n} lines of `{src}` to `{dst}`.",
                    [put(src, lines)], f"{cmd} -n {n} {src} > {dst}", [{"kind": "text", "path": dst, "content": text(part)}])
    return make


def extract_matching(r: random.Random) -> Spec:
    src, dst = files(r)
    lines = sentences(r, r.randint(6, 12), 2, 5)
    word = r.choice(" ".join(lines).split())
    return Spec(f"Write the lines of `{src}` that contain `{word}` to `{dst}`, in their order.",
                [put(src, lines)], f"grep {word} {src} > {dst}",
                [{"kind": "text", "path": dst, "content": text([x for x in lines if word in x])}])


def extract_column(r: random.Random) -> Spec:
    stem = r.choice(("people", "staff", "members", "players"))
    columns = ("name", "age", "city")
    col = r.randrange(3)
    rows = [[w, str(r.randint(18, 90)), r.choice(CITIES)] for w in r.sample(WORDS, r.randint(4, 9))]
    return Spec(f"`{stem}.csv` has the comma-separated columns name, age, city. Write its `{columns[col]}` column, "
                f"one value per line in the file's order, to `{columns[col]}s.txt`.",
                [put(f"{stem}.csv", [",".join(row) for row in rows])], f"cut -d, -f{col + 1} {stem}.csv > {columns[col]}s.txt",
                [{"kind": "text", "path": f"{columns[col]}s.txt", "content": text([row[col] for row in rows])}])


EXTRACT = (_part("first"), _part("last"), extract_matching, extract_column)


# ---- script: an executable that prints something (the checks run it with arguments they choose) ----------
def _script(r: random.Random, task: str, body: str, runs: list[tuple[list[str], str]]) -> Spec:
    name = f"{r.choice(WORDS)}.sh"
    return Spec(f"Create an executable bash script `{name}` in the current folder that {task}.", [],
                f"printf '#!/bin/bash\\n{body}\\n' > {name} && chmod +x {name}",
                [{"kind": "run", "argv": [f"./{name}", *args], "stdout": out} for args, out in runs])


def script_message(r: random.Random) -> Spec:
    msg = " ".join(r.sample(WORDS, r.randint(2, 4)))
    return _script(r, f"prints `{msg}`", f"echo {msg}", [([], f"{msg}\n")])


def script_sum(r: random.Random) -> Spec:
    pairs = [(r.randint(1, 500), r.randint(1, 500)) for _ in range(2)]
    return _script(r, "prints the sum of its two number arguments (e.g. `3 4` prints `7`)", "echo $(($1 + $2))",
                   [([str(a), str(b)], f"{a + b}\n") for a, b in pairs])


def script_greet(r: random.Random) -> Spec:
    greeting = r.choice(("Hello", "Hi", "Welcome", "Goodbye"))
    names = r.sample(WORDS, 2)
    return _script(r, f"prints `{greeting}, NAME!` for the NAME given as its argument", f'echo "{greeting}, $1!"',
                   [([n], f"{greeting}, {n}!\n") for n in names])


def script_repeat(r: random.Random) -> Spec:
    word = r.choice(WORDS)
    counts = r.sample(range(1, 9), 2)
    return _script(r, f"prints the word `{word}` as many times as its number argument says, one per line",
                   f'for i in $(seq $1); do echo {word}; done', [([str(n)], text([word] * n)) for n in counts])


SCRIPT = (script_message, script_sum, script_greet, script_repeat)


# ---- archive: tar and gzip ----------------------------------------------------------------------------------
def _tree(r: random.Random, folder: str) -> dict[str, str]:
    """A few files under `folder` with random contents: relative path -> content."""
    return {f"{folder}/{n}.txt": text(sentences(r, r.randint(1, 3), 2, 4)) for n in r.sample(WORDS, r.randint(2, 4))}


def _write_tree(tree: dict[str, str]) -> list[str]:
    dirs = sorted({p.rsplit("/", 1)[0] for p in tree})
    return [f"mkdir -p {' '.join(dirs)}"] + [put(p, c.splitlines()) for p, c in tree.items()]


def archive_create(r: random.Random) -> Spec:
    folder, name = r.sample(("docs", "src", "photos", "config", "reports", "backup"), 2)
    tree = _tree(r, folder)
    return Spec(f"Create a gzip-compressed tar archive `{name}.tar.gz` of the folder `{folder}/` (paths inside it start with `{folder}/`).",
                _write_tree(tree), f"tar -czf {name}.tar.gz {folder}", [{"kind": "tar", "path": f"{name}.tar.gz", "members": tree}])


def archive_extract(r: random.Random) -> Spec:
    folder, out = r.sample(("docs", "src", "photos", "config", "reports", "backup"), 2)
    tree = _tree(r, folder)
    return Spec(f"Extract the archive `bundle.tar.gz` into the folder `{out}/` (create it).",
                _write_tree(tree) + [f"tar -czf bundle.tar.gz {folder} && rm -r {folder}"],
                f"mkdir -p {out} && tar -xzf bundle.tar.gz -C {out}",
                [{"kind": "text", "path": f"{out}/{p}", "content": c} for p, c in tree.items()])


def archive_gzip(r: random.Random) -> Spec:
    (src,) = files(r, 1)
    lines = sentences(r, r.randint(2, 6))
    return Spec(f"Compress `{src}` with gzip, so that `{src}.gz` replaces it.",
                [put(src, lines)], f"gzip {src}",
                [{"kind": "gzip", "path": f"{src}.gz", "content": text(lines)}, {"kind": "absent", "path": src}])


def archive_gunzip(r: random.Random) -> Spec:
    (src,) = files(r, 1)
    lines = sentences(r, r.randint(2, 6))
    return Spec(f"Decompress `{src}.gz` so that `{src}` holds its content.",
                [put(src, lines), f"gzip {src}"], f"gunzip {src}.gz", [{"kind": "text", "path": src, "content": text(lines)}])


ARCHIVE = (archive_create, archive_extract, archive_gzip, archive_gunzip)


# ---- permissions: chmod -----------------------------------------------------------------------------------------
def _mode(path: str, mode: int) -> dict[str, Any]:
    """A check that `path`'s permission bits are exactly `mode`."""
    return {"kind": "mode", "path": path, "set": mode, "clear": 0o777 & ~mode}


def perm_exact(r: random.Random) -> Spec:
    (src,) = files(r, 1)
    mode = r.choice((0o600, 0o640, 0o700, 0o750, 0o755, 0o444, 0o400, 0o664))
    return Spec(f"Set the permissions of `{src}` to `{mode:o}` (octal).",
                [f"echo {r.choice(WORDS)} > {src} && chmod 644 {src}"], f"chmod {mode:o} {src}", [_mode(src, mode)])


def perm_private(r: random.Random) -> Spec:
    name = f"{r.choice(WORDS)}.{r.choice(('key', 'pem', 'secret'))}"
    return Spec(f"Make `{name}` readable and writable by its owner only, with no permissions for anyone else.",
                [f"echo {r.choice(WORDS)} > {name} && chmod 664 {name}"], f"chmod 600 {name}", [_mode(name, 0o600)])


def perm_scripts(r: random.Random) -> Spec:
    folder = r.choice(("bin", "scripts", "tools"))
    sh = [f"{folder}/{w}.sh" for w in r.sample(WORDS, r.randint(2, 4))]
    other = [f"{folder}/{w}.{r.choice(('txt', 'conf', 'md'))}" for w in r.sample(WORDS, 2)]
    return Spec(f"Make every `.sh` file in `{folder}/` executable, and leave the other files there as they are.",
                [f"mkdir -p {folder} && touch {' '.join(sh + other)} && chmod 644 {' '.join(sh + other)}"],
                f"chmod +x {folder}/*.sh",
                [{"kind": "mode", "path": p, "set": 0o700, "clear": 0} for p in sh] + [_mode(p, 0o644) for p in other])


def perm_folder(r: random.Random) -> Spec:
    folder = r.choice(("private", "secrets", "vault", "keys"))
    tree = _tree(r, folder)
    return Spec(f"Remove every permission of group and others from the folder `{folder}/` and everything in it "
                f"(keep the owner's permissions).",
                _write_tree(tree) + [f"chmod 755 {folder} && chmod 644 {folder}/*"], f"chmod -R go-rwx {folder}",
                [_mode(folder, 0o700)] + [_mode(p, 0o600) for p in tree])


PERMISSIONS = (perm_exact, perm_private, perm_scripts, perm_folder)


# ---- git ----------------------------------------------------------------------------------------------------------
GIT_CONFIG = ("git config --global user.email agent@example.com && git config --global user.name Agent"
              " && git config --global init.defaultBranch main")


def _message(r: random.Random) -> str:
    return f"{r.choice(('add', 'update', 'fix', 'remove'))} {r.choice(WORDS)} {r.choice(WORDS)}"


def _repo(r: random.Random, repo: str) -> tuple[dict[str, str], list[str]]:
    """A repository with one commit ("start"): its files and the setup lines making it."""
    tree = _tree(r, repo)
    return tree, [GIT_CONFIG] + _write_tree(tree) + [f"cd {repo} && git init -q && git add -A && git commit -qm start && cd .."]


def _git_file(repo: str, ref: str, path: str, content: str | None) -> dict[str, Any]:
    return {"kind": "git_file", "repo": repo, "ref": ref, "path": path, "content": content}


def git_init(r: random.Random) -> Spec:
    repo = r.choice(("project", "app", "site", "tool"))
    tree = _tree(r, repo)
    msg = _message(r)
    return Spec(f"Turn the folder `{repo}/` into a git repository and commit all of its files in one commit with the message `{msg}`.",
                [GIT_CONFIG] + _write_tree(tree), f"cd {repo} && git init -q && git add -A && git commit -qm '{msg}'",
                [{"kind": "git_log", "repo": repo, "ref": "HEAD", "messages": [msg]}]
                + [_git_file(repo, "HEAD", p.split("/", 1)[1], c) for p, c in tree.items()])


def git_commit_change(r: random.Random) -> Spec:
    repo = r.choice(("project", "app", "site", "tool"))
    tree, setup = _repo(r, repo)
    path = r.choice(sorted(tree))
    new = tree[path] + text(sentences(r, 1, 2, 4))
    msg = _message(r)
    return Spec(f"In the git repository `{repo}/`, commit the change already made to `{path.split('/', 1)[1]}` with the message `{msg}`.",
                setup + [put(path, new.splitlines())], f"cd {repo} && git commit -qam '{msg}'",
                [{"kind": "git_log", "repo": repo, "ref": "HEAD", "messages": [msg, "start"]},
                 _git_file(repo, "HEAD", path.split("/", 1)[1], new)])


def git_branch(r: random.Random) -> Spec:
    repo = r.choice(("project", "app", "site", "tool"))
    _, setup = _repo(r, repo)
    branch, name = r.choice(("feature", "dev", "experiment", "topic")), f"{r.choice(WORDS)}.txt"
    line = r.choice(WORDS)
    return Spec(f"In the git repository `{repo}/`, create a branch `{branch}` from `main` and commit on it a new file `{name}` "
                f"containing the line `{line}` (any message). `main` must stay as it is.", setup,
                f"cd {repo} && git checkout -qb {branch} && echo {line} > {name} && git add {name} && git commit -qm 'add {name}'",
                [{"kind": "git_log", "repo": repo, "ref": "main", "messages": ["start"]},
                 {"kind": "git_count", "repo": repo, "ref": branch, "count": 2},
                 _git_file(repo, branch, name, text([line])), _git_file(repo, "main", name, None)])


def git_tag(r: random.Random) -> Spec:
    repo = r.choice(("project", "app", "site", "tool"))
    _, setup = _repo(r, repo)
    tag = f"v{r.randint(0, 3)}.{r.randint(0, 9)}.{r.randint(0, 9)}"
    return Spec(f"In the git repository `{repo}/`, tag the current commit of `main` as `{tag}`.", setup,
                f"cd {repo} && git tag {tag}", [{"kind": "git_same", "repo": repo, "refs": [f"refs/tags/{tag}", "main"]}])


GIT = (git_init, git_commit_change, git_branch, git_tag)

FAMILIES: dict[str, tuple[Callable[[random.Random], Spec], ...]] = {
    "sort": SORT, "dedupe": DEDUPE, "count": COUNT, "replace": REPLACE, "write": WRITE, "extract": EXTRACT,
    "script": SCRIPT, "archive": ARCHIVE, "permissions": PERMISSIONS, "git": GIT,
}
