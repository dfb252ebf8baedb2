#!/usr/bin/env bash
# policy=sglang: SGLang's Python package, for its request/response schemas (tests/sglang_schema.py
# checks our client's requests against them). Installed without its dependencies: they pin
# torch 2.14.1 and CUDA kernels (flashinfer, sgl-kernel, triton). On this CPU machine we only
# import its schema modules, which need the four small packages below. A GPU host installs
# SGLang the usual way instead (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '[setup sglang] %s\n' "$*"; }
py=.venv/bin/python
[ -x "$py" ] || { say "no .venv: skipped"; exit 0; }
if [ "$("$py" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" != "0.5.23" ]; then
  say "installing sglang==0.5.23 --no-deps"
  .venv/bin/pip install -q --no-deps sglang==0.5.23
fi
if ! "$py" -c 'import msgspec, orjson, pybase64, zmq' 2>/dev/null; then
  say "installing the schema modules' dependencies"
  .venv/bin/pip install -q --no-deps msgspec==0.23.0 orjson==3.13.0 pybase64==1.5.1 pyzmq==27.3.0
fi
