#!/usr/bin/env bash
# The main job of dlpack-rs, end to end, for a newcomer to watch:
#   1. Rust only: export a Vec with the safe layer, import it as a consumer would, print what
#      the consumer sees, and show that the producer's deleter ran exactly once
#      (dlpack-rs/examples/demo.rs).
#   2. With Python (when the interop extension tests/pyext exists): hand a Rust tensor to
#      numpy and torch and show that they share its memory.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> Rust: export, consume, release (cargo run -p dlpack-rs --example demo)"
cargo run --quiet -p dlpack-rs --example demo

if [[ ! -f tests/pyext/Cargo.toml ]]; then
  echo
  echo "==> Python: skipped, the interop extension (tests/pyext) is not in this checkout yet"
  # TODO: once tests/pyext lands, the branch below builds it and runs the numpy/torch demo.
  exit 0
fi

echo
echo "==> Python: hand a Rust tensor to numpy and torch"
if [[ ! -x .venv/bin/python ]]; then
  echo "no .venv yet: run 'bash tests/run-all.sh' once (it creates .venv with numpy and torch)" >&2
  exit 1
fi
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" \
  .venv/bin/maturin develop --quiet --release -m tests/pyext/Cargo.toml
.venv/bin/python tests/demo.py
