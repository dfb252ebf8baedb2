#!/bin/bash
set -e
cd dup && declare -A seen && for f in $(ls | sort); do h=$(md5sum < "$f"); if [ -n "${seen[$h]}" ]; then rm -- "$f"; else seen[$h]=1; fi; done
