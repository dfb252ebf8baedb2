#!/bin/bash
set -e
sed -i 's/range(1, len(nums))/range(len(nums))/' average.py
