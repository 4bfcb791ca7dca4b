#!/usr/bin/env bash
# One abi3 wheel, every CPython from 3.9 to 3.13: builds the interop extension (tests/pyext)
# once with dlpack-rs feature `abi3` (pyo3's stable ABI, Python >= 3.9), then for each
# interpreter pyenv has, makes a small venv (numpy and pytest only), installs that single
# wheel and runs the interop suite's numpy part (tests/python: modules that need torch, jax
# or pyarrow skip themselves when those are missing).
#
# Interpreters pyenv lacks are skipped with a message; 3.9 and 3.13 are required whenever
# pyenv has them. Exit status: 0 every version ran, 3 none could run (no pyenv, or none of the
# versions), 4 some were missing (named in target/abi3-matrix/missing); anything else failed.
#
# Environment:
#   MATURIN   the maturin to use (default: .venv/bin/maturin, else maturin on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."

versions=(3.9 3.10 3.11 3.12 3.13)
required=(3.9 3.13)
work=target/abi3-matrix

mkdir -p "$work"
rm -f "$work/missing"
if ! command -v pyenv >/dev/null 2>&1; then
  echo "abi3-matrix: pyenv not found: skipping the CPython 3.9-3.13 matrix"
  exit 3
fi
root=$(pyenv root)

# The newest installed patch release of a minor version, or nothing.
interpreter() {
  local v
  v=$(pyenv versions --bare 2>/dev/null | grep -E "^${1//./\\.}\.[0-9]+$" | sort -V | tail -n1 || true)
  if [[ -n "$v" && -x "$root/versions/$v/bin/python$1" ]]; then
    echo "$root/versions/$v/bin/python$1"
  fi
}

declare -A found=()
missing=()
for minor in "${versions[@]}"; do
  py=$(interpreter "$minor")
  if [[ -n "$py" ]]; then
    found[$minor]=$py
  else
    echo "abi3-matrix: CPython $minor is not installed in pyenv: skipped"
    missing+=("$minor")
  fi
done
if [[ ${#found[@]} -eq 0 ]]; then
  echo "abi3-matrix: no CPython 3.9-3.13 in pyenv: nothing to run"
  exit 3
fi

maturin=${MATURIN:-}
if [[ -z "$maturin" ]]; then
  if [[ -x .venv/bin/maturin ]]; then maturin=.venv/bin/maturin; else maturin=$(command -v maturin || true); fi
fi
if [[ -z "$maturin" ]]; then
  echo "abi3-matrix: maturin not found (install it in .venv or set MATURIN)" >&2
  exit 1
fi

# Build once, with the oldest interpreter found (the wheel's tag is cp39-abi3 regardless).
builder=""
for minor in "${versions[@]}"; do
  if [[ -n "${found[$minor]:-}" ]]; then builder=${found[$minor]}; break; fi
done
rm -rf "$work/wheel"
mkdir -p "$work/wheel"
echo "abi3-matrix: building the abi3 wheel of tests/pyext"
"$maturin" build --quiet --release -m tests/pyext/Cargo.toml --features abi3 \
  -i "$builder" --out "$work/wheel"
wheels=("$work"/wheel/*-abi3-*.whl)
if [[ ${#wheels[@]} -ne 1 || ! -f "${wheels[0]}" ]]; then
  echo "abi3-matrix: expected exactly one abi3 wheel in $work/wheel, got: ${wheels[*]}" >&2
  exit 1
fi
wheel=${wheels[0]}
echo "abi3-matrix: $(basename "$wheel")"

results=()
for minor in "${versions[@]}"; do
  py=${found[$minor]:-}
  [[ -z "$py" ]] && continue
  venv="$work/venv-$minor"
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import numpy, pytest' 2>/dev/null; then
    echo "abi3-matrix: [$minor] creating $venv (numpy, pytest)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --progress-bar on numpy pytest
  fi
  "$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheel"
  echo "abi3-matrix: [$minor] $("$venv/bin/python" -c 'import sys, numpy; print("CPython", sys.version.split()[0], "numpy", numpy.__version__)')"
  # The installed wheel, not a development build, must be what the suite imports.
  "$venv/bin/python" -c '
import pathlib, dlpack_testext
libs = [p.name for p in pathlib.Path(dlpack_testext.__file__).parent.glob("dlpack_testext*.so")]
assert libs == ["dlpack_testext.abi3.so"], libs'
  log="$work/pytest-$minor.log"
  status=0
  "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider >"$log" 2>&1 || status=$?
  summary=$(tail -n1 "$log")
  echo "abi3-matrix: [$minor] $summary"
  if [[ $status -ne 0 ]] || ! grep -q " passed" <<<"$summary"; then
    echo "abi3-matrix: [$minor] FAILED (log: $log)" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  results+=("$minor")
done

for minor in "${required[@]}"; do
  if [[ -n "${found[$minor]:-}" ]] && [[ " ${results[*]} " != *" $minor "* ]]; then
    echo "abi3-matrix: CPython $minor is installed but did not run" >&2
    exit 1
  fi
done
echo "abi3-matrix: one abi3 wheel passed under CPython ${results[*]}"
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "CPython ${missing[*]} not installed" >"$work/missing"
  exit 4
fi
