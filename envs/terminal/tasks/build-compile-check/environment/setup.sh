#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p pkg/sub
printf 'def add(a, b):\n    return a + b\n' > pkg/math_utils.py
printf 'from .math_utils import add\n' > pkg/__init__.py
printf 'def shout(s):\n    return s.upper() + "!"\n' > pkg/sub/text.py
printf 'def area(w, h):\n    return w * h\n\ndef perimeter(w, h)\n    return 2 * (w + h)\n' > pkg/sub/geometry.py
touch pkg/sub/__init__.py
