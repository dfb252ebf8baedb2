#!/bin/bash
set -e
find config -name '*.conf' -exec sed -i 's/localhost/db.internal/g' {} +
