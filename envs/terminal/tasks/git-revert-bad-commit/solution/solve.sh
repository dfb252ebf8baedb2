#!/bin/bash
set -e
cd repo && git revert --no-edit HEAD
