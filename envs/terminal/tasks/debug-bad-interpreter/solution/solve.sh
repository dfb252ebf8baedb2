#!/bin/bash
set -e
sed -i 's/\r$//' run.sh && chmod +x run.sh
