#!/bin/bash
set -e
find data -type f -size +1000c | sort > large.txt
