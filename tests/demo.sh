#!/usr/bin/env bash
# The main job of dlpack-rs, end to end, for a newcomer to watch:
#   1. Rust only: export a Vec with the safe layer, import it as a consumer would, print what
#      the consumer sees, and show that the producer's deleter ran exactly once
#      (dlpack-rs/examples/demo.rs).
#   2. With Python: build the example package examples/image-demo (a maturin project) into
#      .venv (created or reused, with numpy, torch and maturin) and run its demo script: a
#      Rust image viewed by numpy and torch without a copy, processed in place from Rust, and
#      a round trip, printing shapes, dtypes and data pointers.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> Rust: export, consume, release (cargo run -p dlpack-rs --example demo)"
cargo run --quiet -p dlpack-rs --example demo

echo
echo "==> Python: examples/image-demo, a Rust image shared with numpy and torch, no copy"
# A CPython 3.11: $PYTHON, pyenv's newest 3.11, or python3.11 on PATH (as tests/run-all.sh).
py="${PYTHON:-}"
if [[ -z "$py" ]] && command -v pyenv >/dev/null 2>&1; then
  v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.11(\.[0-9]+)?$' | sort -V | tail -n1 || true)
  [[ -n "$v" ]] && py="$(pyenv root)/versions/$v/bin/python3.11"
fi
[[ -z "$py" ]] && py=$(command -v python3.11 || true)
if [[ -z "$py" ]]; then
  echo "no CPython 3.11 found (install it, e.g. with pyenv, or set PYTHON)" >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "creating .venv with $py"
  "$py" -m venv .venv
fi
if ! .venv/bin/python -c 'import numpy, torch' 2>/dev/null || [[ ! -x .venv/bin/maturin ]]; then
  echo "installing maturin, numpy and torch into .venv (pinned in tests/python/constraints.txt);"
  echo "torch is several GB with its CUDA libraries: a few minutes the first time"
  .venv/bin/python -m pip install --progress-bar on -c tests/python/constraints.txt maturin numpy torch
fi
# Libraries built with pyo3 link libpython dynamically when the interpreter is shared (pyenv).
py_libdir=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
export LD_LIBRARY_PATH="$py_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" \
  .venv/bin/maturin develop --quiet --release -m examples/image-demo/Cargo.toml
.venv/bin/python examples/image-demo/demo.py
