#!/bin/bash
set -e
sed -i '1i import json' report.py
