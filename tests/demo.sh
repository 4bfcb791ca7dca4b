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

echo
if [[ ! -f tests/pyext/Cargo.toml ]]; then
  echo "==> Python: skipped, the interop extension (tests/pyext) is not in this checkout yet"
  exit 0
fi

echo "==> Python: a Rust tensor shared with numpy and torch, no copy"
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
  echo "installing maturin, numpy and torch into .venv (torch is large: a few minutes the first time)"
  .venv/bin/python -m pip install --quiet maturin numpy torch
fi
# Libraries built with pyo3 link libpython dynamically when the interpreter is shared (pyenv).
py_libdir=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
export LD_LIBRARY_PATH="$py_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" \
  .venv/bin/maturin develop --quiet --release -m tests/pyext/Cargo.toml

.venv/bin/python - <<'PY'
import gc

import numpy as np
import torch

import dlpack_testext as ext  # the test extension module, built from tests/pyext

# A Rust Vec<f64> [0, 1, 2, 3, 4, 5], exported with dlpack_rs::safe::Export as a 2x3 tensor.
t = ext.make_export_f64([2, 3])
print("rust tensor:", t)

a = np.from_dlpack(t)      # numpy takes it through __dlpack__
b = torch.from_dlpack(t)   # so does torch
print("numpy :", a.shape, a.dtype, a.strides, "at", hex(a.ctypes.data))
print("torch :", tuple(b.shape), b.dtype, b.stride(), "at", hex(b.data_ptr()))
assert a.ctypes.data == b.data_ptr(), "numpy and torch must see the same memory"
print("same memory:", a.ctypes.data == b.data_ptr())

a[0, 0] = 42.0                 # write through numpy ...
print("after a[0, 0] = 42 in numpy, torch sees b[0, 0] =", b[0, 0].item())
assert b[0, 0].item() == 42.0

ext.add_one(b)                 # ... and from Rust, through torch's tensor
print("after Rust added 1 through torch, numpy sees", a.tolist())
assert a.tolist() == [[43.0, 2.0, 3.0], [4.0, 5.0, 6.0]]

# A Rust-owned buffer that counts its drops: freed exactly once, when the last user is gone.
before = ext.counters()
u = ext.make_tensor(bytes(8 * 4), "float32", [2, 4])
c = torch.from_dlpack(u)
del u
gc.collect()
print("created/dropped while torch still holds it:", tuple(x - y for x, y in zip(ext.counters(), before)))
del c
gc.collect()
created, dropped = (x - y for x, y in zip(ext.counters(), before))
print("created/dropped after torch let go:", (created, dropped))
assert (created, dropped) == (1, 1), "the deleter must free the buffer exactly once"
print("python demo: OK")
PY
