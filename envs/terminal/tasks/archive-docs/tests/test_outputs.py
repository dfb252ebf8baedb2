# Checks the task's results (run from the work dir); exits non-zero on failure.
import os
import tarfile
with tarfile.open("backup.tar.gz", "r:gz") as t:
    names = {m.name.rstrip("/") for m in t.getmembers() if m.isfile()}
    assert {"docs/guide.md", "docs/notes.txt", "docs/img/a.png"} <= names, names
    assert t.extractfile("docs/guide.md").read() == b"# Guide\n"
