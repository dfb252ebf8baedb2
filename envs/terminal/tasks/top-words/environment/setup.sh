#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
python3 - <<'EOF'
import random
r = random.Random(5)
words = ["apple"]*40 + ["Banana"]*33 + ["cherry"]*27 + ["date"]*21 + ["elder"]*15 + ["fig"]*9 + ["grape"]*4
r.shuffle(words)
out = []
for i, w in enumerate(words):
    out.append(w.upper() if i % 7 == 0 else w)
    out.append(r.choice([" ", ", ", ". ", "\n", "; "]))
open("text.txt", "w").write("".join(out))
EOF
