#!/bin/bash
set -e
cd repo && git checkout -q -b feature main && echo done > feature.txt && git add feature.txt && git commit -qm "add feature"
