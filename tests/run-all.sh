#!/usr/bin/env bash
# Every test of the project, in order, failing fast:
#   format, clippy, tests (all features, then none), the no_std proof, docs, a check of the
#   pyo3 layer against a free-threaded CPython 3.14 configuration, the C ABI proof against the
#   official dlpack.h, valgrind and AddressSanitizer over the test binaries, and the Python interop
#   suite (numpy, torch, jax, pyarrow, array-api-strict) in a local .venv, and one abi3 wheel
#   of the test extension under every CPython 3.9-3.13 that pyenv has (numpy part).
#
# Needs: Rust stable, gcc, valgrind, CPython 3.11 (on PATH or through pyenv), and network
# access to the Rust and Python package registries on the first run.
#
# Environment:
#   PYTHON   the CPython 3.11 to use (default: pyenv's 3.11, else python3.11 on PATH)
#   FUZZ_SECONDS  how long the cargo-fuzz step runs (default 60; needs a nightly toolchain)
set -Eeuo pipefail
cd "$(dirname "$0")/.."

total=13
step_no=0
current="setup"
t_start=$(date +%s)
t_step=$t_start
passed=()
skipped=0

on_failure() {
  echo
  echo "==================== summary ===================="
  if [[ ${#passed[@]} -gt 0 ]]; then printf '%s\n' "${passed[@]}"; fi
  echo "[$step_no/$total] $current: FAILED"
  echo "run-all: FAILED at step [$step_no/$total] $current"
}
trap on_failure ERR

step() {
  finish_step
  step_no=$((step_no + 1))
  current="$1"
  t_step=$(date +%s)
  echo
  echo "==> [$step_no/$total] $current"
}

finish_step() {
  if [[ $step_no -gt 0 ]]; then
    local took=$(($(date +%s) - t_step))
    passed+=("[$step_no/$total] $current: ${step_result:-ok} (${took}s)")
    echo "--> ${step_result:-ok} (${took}s)"
  fi
  step_result=""
}

# A CPython 3.11: $PYTHON, pyenv's newest 3.11, or python3.11 on PATH.
find_python() {
  if [[ -n "${PYTHON:-}" ]]; then
    echo "$PYTHON"
    return
  fi
  if command -v pyenv >/dev/null 2>&1; then
    local v
    v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.11(\.[0-9]+)?$' | sort -V | tail -n1 || true)
    if [[ -n "$v" && -x "$(pyenv root)/versions/$v/bin/python3.11" ]]; then
      echo "$(pyenv root)/versions/$v/bin/python3.11"
      return
    fi
  fi
  if command -v python3.11 >/dev/null 2>&1 && python3.11 -c '' >/dev/null 2>&1; then
    command -v python3.11
    return
  fi
  echo "run-all: no CPython 3.11 found (install it, e.g. with pyenv, or set PYTHON)" >&2
  return 1
}

PY=$(find_python)
echo "run-all: using $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
export PYTHON="$PY"
# pyo3 builds against `python3` unless told otherwise; point it at the same 3.11 if needed.
if [[ -z "${PYO3_PYTHON:-}" ]] && [[ "$(python3 -c 'import sys; print(sys.version_info[:2] == (3, 11))' 2>/dev/null)" != "True" ]]; then
  export PYO3_PYTHON="$PY"
fi
# Test binaries built with the pyo3 feature link libpython; a shared one (pyenv's) lives
# outside the default library path.
py_libdir=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
if [[ -n "$py_libdir" ]]; then
  export LD_LIBRARY_PATH="$py_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# Whether a nightly toolchain is there; if not, says so and counts the step as skipped.
nightly_or_skip() {
  if command -v rustup >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
    return 0
  fi
  echo "no nightly toolchain: skipping $1 (install one with 'rustup toolchain install nightly')"
  step_result="skipped (no nightly toolchain)"
  skipped=$((skipped + 1))
  return 1
}

step "cargo fmt --all --check"
cargo fmt --all --check

step "cargo clippy --workspace --all-targets --all-features -- -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test --workspace --all-features"
cargo test --workspace --all-features

step "cargo test -p dlpack-rs (no features)"
cargo test -p dlpack-rs

step "no_std: dlpack-rs builds with --no-default-features and has no dependencies"
# Without features the crate is #![no_std]: any use of std would not compile.
cargo build -p dlpack-rs --no-default-features
deps=$(cargo tree -p dlpack-rs --no-default-features -e normal --prefix none | sed 1d | sed '/^$/d')
if [[ -n "$deps" ]]; then
  echo "dlpack-rs without features must have no dependencies, but has:" >&2
  echo "$deps" >&2
  false
fi
echo "no dependencies"

step "cargo doc --workspace --all-features --no-deps (warnings are errors)"
RUSTDOCFLAGS="-Dwarnings" cargo doc --workspace --all-features --no-deps

step "free-threaded CPython 3.14: cargo check of the pyo3 layer, the test extension and the example"
# No free-threaded CPython can be installed here: check against its build configuration
# (Py_GIL_DISABLED), so that the pyo3 layer keeps compiling for it.
PYO3_CONFIG_FILE="$PWD/tests/free-threaded/pyo3-config-3.14t.txt" \
  cargo check -p dlpack-rs -p dlpack-testext -p image-demo --all-targets \
  --features dlpack-rs/pyo3,dlpack-rs/derive,dlpack-rs/ndarray,dlpack-rs/half,dlpack-rs/num-complex \
  --target-dir target/free-threaded

step "C ABI: dlpack_rs::ffi vs the official dlpack.h, compiled with gcc"
bash tests/abi/check.sh

step "valgrind: dlpack-rs test binaries (no features, all features)"
for features in "" "--all-features"; do
  # shellcheck disable=SC2086 # $features is one flag or none
  cargo test -p dlpack-rs $features --no-run
  # shellcheck disable=SC2086 # $features is one flag or none
  mapfile -t bins < <(cargo test -p dlpack-rs $features --no-run --message-format=json 2>/dev/null \
    | "$PY" -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("profile", {}).get("test") and msg.get("executable"):
        src = msg["target"]["src_path"]
        # trybuild tests only drive cargo/rustc on compile-fail cases: nothing to check there.
        text = open(src, encoding="utf-8").read()
        if "trybuild" in text:
            print("skipping the trybuild test", msg["target"]["name"], file=sys.stderr)
            continue
        if "Python::initialize" in text:
            # The CPython allocator is not valgrind-clean; the same code runs in the
            # Python suite and under AddressSanitizer without Python.
            print("skipping the embedded-CPython test", msg["target"]["name"], file=sys.stderr)
            continue
        print(msg["executable"])
')
  if [[ ${#bins[@]} -eq 0 ]]; then
    echo "no test binaries found for dlpack-rs ${features:-(no features)}" >&2
    false
  fi
  for bin in "${bins[@]}"; do
    echo "valgrind ${features:-(no features)}: $(basename "$bin")"
    valgrind --quiet --leak-check=full --error-exitcode=1 --suppressions=tests/valgrind.supp "$bin" -q
  done
done

step "AddressSanitizer: dlpack-rs test binaries (nightly -Zsanitizer=address, without Python)"
# Miri cannot be installed here; ASan (with LeakSanitizer) checks every test of the core,
# the borrow registry's threads included. The pyo3 feature is left out (libpython is not
# instrumented); the Python suite runs under the same code paths below.
if nightly_or_skip "AddressSanitizer"; then
  host=$(rustc -vV | sed -n 's/^host: //p')
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" RUSTFLAGS="-Zsanitizer=address" \
    cargo +nightly test -p dlpack-rs --features std,half,num-complex,ndarray \
    --target "$host" --target-dir target/asan --lib --tests
fi

step "fuzz: the import validator under cargo-fuzz (nightly, ${FUZZ_SECONDS:-60}s)"
# The same harness runs on stable in dlpack-rs/tests/fuzz_regressions.rs (kept crash inputs
# and a bounded pseudo-random run); this step explores further with libFuzzer and ASan.
if nightly_or_skip "cargo-fuzz"; then
  if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz"
    cargo install --locked cargo-fuzz
  fi
  if ! (cd fuzz && cargo +nightly fuzz run import_validator -- -max_total_time="${FUZZ_SECONDS:-60}"); then
    echo "the fuzzer found a crash: copy the input from fuzz/artifacts/import_validator/ into" >&2
    echo "fuzz/regressions/ (replayed by dlpack-rs/tests/fuzz_regressions.rs) and fix it" >&2
    false
  fi
fi

step "Python interop suite (.venv, maturin, pytest)"
if [[ ! -d tests/python && ! -f tests/pyext/Cargo.toml ]]; then
  echo "tests/python and tests/pyext do not exist yet: nothing to run"
  step_result="skipped (no Python suite yet)"
  skipped=$((skipped + 1))
else
  if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
    echo "creating .venv with $PY"
    rm -rf .venv
    "$PY" -m venv .venv
  fi
  if .venv/bin/python -c 'import pytest, numpy, torch, jax, pyarrow, array_api_strict' 2>/dev/null \
    && [[ -x .venv/bin/maturin ]]; then
    echo "Python packages already installed"
  else
    echo "installing Python packages (torch is large; the first run takes a few minutes)"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet maturin pytest numpy torch "jax[cpu]" pyarrow array-api-strict
  fi
  if [[ -f tests/pyext/Cargo.toml ]]; then
    VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" \
      .venv/bin/maturin develop --release -m tests/pyext/Cargo.toml
  fi
  # A second extension module with its own copy of dlpack-rs: the suite checks that the two
  # share one borrow registry.
  VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" \
    .venv/bin/maturin develop --release -m examples/image-demo/Cargo.toml
  if [[ -d tests/python ]]; then
    .venv/bin/python -m pytest tests/python -q
  else
    echo "tests/python does not exist yet: built the extension only"
    step_result="partial (no tests/python yet)"
    skipped=$((skipped + 1))
  fi
fi

step "abi3: one wheel, the numpy part of the interop suite under CPython 3.9-3.13 (pyenv)"
MATURIN="$PWD/.venv/bin/maturin" bash tests/abi3-matrix.sh

finish_step
trap - ERR
echo
echo "==================== summary ===================="
printf '%s\n' "${passed[@]}"
took=$(($(date +%s) - t_start))
if [[ $skipped -eq 0 ]]; then
  echo "run-all: PASSED, all $total steps, in ${took}s"
else
  echo "run-all: PASSED, but $skipped of $total steps skipped or partial (see above), in ${took}s"
fi
