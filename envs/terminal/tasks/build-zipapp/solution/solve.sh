#!/bin/bash
set -e
python3 -m zipapp src -m app.cli:main -o app.pyz
