#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
git config --global user.email agent@example.com; git config --global user.name Agent; git config --global init.defaultBranch main
mkdir repo && cd repo && git init -q
for i in 1 2 3 4 5 6; do echo "value $i" >> settings.py; [ $i = 4 ] && echo "SECRET_KEY = 'abc'" >> settings.py; git add . ; git commit -qm "change $i"; done
sed -i '/SECRET_KEY/d' settings.py; git commit -qam "remove key"
