#!/usr/bin/env bash
# Builds the benchmark extension (dlpack-rs, rust-numpy and dlpark side by side) into
# benches/.venv and prints the per-call cost table. Not part of the test suite.
#
# Environment: PYTHON (default python3.11), BENCH_ARGS (passed to bench.py, e.g. "--rounds 3").
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3.11}
# The test command's venv has numpy and torch already (several GB): use it when it is there.
venv=.venv
if [[ -x ../.venv/bin/python ]]; then venv=../.venv; fi
if [[ ! -x $venv/bin/python ]]; then
  "$PY" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import numpy, torch, tvm_ffi, safetensors' 2>/dev/null || [[ ! -x $venv/bin/maturin ]]; then
  "$venv/bin/python" -m pip install --progress-bar on -c ../tests/python/constraints.txt \
    maturin numpy torch apache-tvm-ffi safetensors
fi
VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
  "$venv/bin/maturin" develop --quiet --release -m ext/Cargo.toml
# Machine-specific OpenBLAS overrides skew numpy's start-up; not wanted while measuring.
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$venv/bin/python" bench.py ${BENCH_ARGS:-}
