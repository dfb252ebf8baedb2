#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
true
