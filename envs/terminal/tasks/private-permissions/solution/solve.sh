#!/bin/bash
set -e
chmod 700 private private/bin private/bin/tool && chmod 600 private/key.pem private/pass.txt
