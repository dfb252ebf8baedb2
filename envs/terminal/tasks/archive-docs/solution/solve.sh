#!/bin/bash
set -e
tar -czf backup.tar.gz docs
