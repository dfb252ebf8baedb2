#!/bin/bash
set -e
cd repo && git tag v1.0 "$(git log --format=%H --grep='^release candidate$')"
