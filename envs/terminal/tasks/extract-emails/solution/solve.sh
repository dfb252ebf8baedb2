#!/bin/bash
set -e
grep -oE '[a-z0-9._+-]+@[a-z0-9.-]+\.[a-z]+' contacts.txt | sort -u > emails.txt
