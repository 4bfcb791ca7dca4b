#!/usr/bin/env bash
# Every test of the project, in order, failing fast. `tests/run-all.sh --list` names the steps.
#
#   tests/run-all.sh              everything (what CI runs)
#   tests/run-all.sh --quick      the everyday tier: fmt, clippy, unit/integration/doc tests,
#                                 valgrind, a short fuzz run, the Python suite (no abi3 matrix)
#   tests/run-all.sh --step NAME  one step (repeatable: --step fmt --step python)
#
# A step that cannot run here (a missing tool, interpreter or toolchain) says why and counts as
# skipped, never as passed; the summary names every skipped step.
#
# Needs: Rust stable (with rustfmt and clippy), gcc, valgrind, CPython 3.11 (on PATH or through
# pyenv; any 3.9-3.13 with PYTHON=...), and access to the Rust and Python package registries on
# the first run. A nightly toolchain adds the AddressSanitizer and libFuzzer steps; pyenv's
# CPython 3.9-3.13 the abi3 matrix.
#
# Environment:
#   PYTHON        the CPython for the Python suite (default: pyenv's 3.11, else python3.11);
#                 each minor version gets its own venv (.venv for 3.11, .venv-3.X otherwise)
#   FUZZ_SECONDS  how long the libFuzzer run lasts, one job per core (default 40, 10 with --quick)
#   MUTANTS_FILES the files (under dlpack-rs/src) the mutants step mutates; default
#                 "safe/borrow/mod.rs safe/borrow/overlap.rs safe/layout/mod.rs
#                 safe/borrow/guard.rs safe/layout/tensor_info.rs safe/import/described.rs
#                 safe/import/views.rs safe/export/copy.rs safe/export/block.rs". Other files are run against every test target
#                 (slower): "safe/export/mod.rs ffi.rs"
set -Eeuo pipefail
cd "$(dirname "$0")/.."
# Unoptimised builds keep line tables only (file and line in backtraces, sanitizer and valgrind
# reports), not full debug info: less to generate and link in every debug build of the run,
# trybuild's included (it inherits the environment). Set either to override.
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}
export CARGO_PROFILE_TEST_DEBUG=${CARGO_PROFILE_TEST_DEBUG:-line-tables-only}
# No incremental caches: every build of the run starts clean, where they only cost disk (about
# half of target/debug) and time. Set CARGO_INCREMENTAL=1 to keep them for local reruns.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# id | tiers | title
STEPS=(
  "fmt|quick|cargo fmt --all --check"
  "clippy|quick|cargo clippy --workspace --all-targets, every feature but candle and burn, -D warnings"
  "layers|quick|ARCHITECTURE.md's layer rule: ffi.rs and safe/ know nothing of Python or the layers above"
  "test-all|quick|cargo test --workspace, every feature but candle and burn (unit, integration, doc, trybuild)"
  "test-none|quick|cargo test -p dlpack-rs (no features)"
  "test-derive|full|cargo test -p dlpack-rs --features derive (the derive alone: its UI cases)"
  "warnings|full|a dependency's build: dlpack-rs's library under each documented feature, alone and with pyo3, prints no warning"
  "no-std|full|no_std: dlpack-rs builds without features and has no dependencies"
  "cudarc|full|feature cudarc without CUDA: cargo check, its unit tests and doctests, the GPU check's extension"
  "doc|full|cargo doc --workspace --no-deps, every feature but candle and burn (warnings are errors; docs.rs badges on nightly)"
  "package|full|cargo package of both crates, and a build of what would be uploaded"
  "msrv|full|rust-version: what the dependencies need, and clippy's incompatible_msrv"
  "free-threaded|full|free-threaded CPython 3.14: cargo check of the pyo3 layer, the test extension and the example"
  "abi|full|C ABI: dlpack_rs::ffi vs the official dlpack.h, compiled with gcc"
  "valgrind|quick|valgrind: dlpack-rs test binaries (no features, every feature but candle and burn)"
  "asan|full|AddressSanitizer: dlpack-rs test binaries (nightly -Zsanitizer=address, without Python)"
  "fuzz|quick|fuzz: the import validator under cargo-fuzz (nightly)"
  "mutants|full|cargo-mutants on the borrow registry, layout, view guards and export ranges: each mutant caught or listed equivalent"
  "python|quick|Python interop suite (venv, maturin, pytest)"
  "candle|full|features candle and burn (~230 crates): clippy, their tests with numpy, torch and jax, their doctests"
  "asan-python|full|AddressSanitizer: the Python suite against the test extension built with -Zsanitizer=address"
  "stubs|full|the image demo's stubs: generated (maturin generate-stubs, feature stubs) as committed, and mypy on a typed caller"
  "newcomer|full|the README's extension module, built from README.md as written, used from numpy"
  "instructions|full|instruction counts per call (callgrind) against tests/perf/budgets.json"
  "abi3|full|abi3: one wheel, the interop suite under CPython 3.9-3.13 (pyenv): its numpy part, the whole of it under 3.11"
)

usage() {
  echo "usage: tests/run-all.sh [--quick] [--step NAME]... [--list]"
}

selected=()
quick=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --step)
      [[ $# -ge 2 ]] || { usage >&2; exit 2; }
      selected+=("$2")
      shift
      ;;
    --list)
      for s in "${STEPS[@]}"; do
        IFS='|' read -r id tiers title <<<"$s"
        printf '%-14s %-6s %s\n' "$id" "$tiers" "$title"
      done
      exit 0
      ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run-all: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

plan=()
for s in "${STEPS[@]}"; do
  IFS='|' read -r id tiers title <<<"$s"
  if [[ ${#selected[@]} -gt 0 ]]; then
    [[ " ${selected[*]} " == *" $id "* ]] && plan+=("$s")
  elif [[ $quick -eq 0 || $tiers == quick ]]; then
    plan+=("$s")
  fi
done
for want in "${selected[@]}"; do
  found=0
  for s in "${plan[@]}"; do [[ ${s%%|*} == "$want" ]] && found=1; done
  if [[ $found -eq 0 ]]; then echo "run-all: no step named $want (see --list)" >&2; exit 2; fi
done
if [[ $quick -eq 1 ]]; then FUZZ_SECONDS=${FUZZ_SECONDS:-10}; fi

# A full run from a clean checkout writes about 16 GiB (target/, the venvs, pip's and cargo's
# caches). Say so up front, rather than fail halfway through a build with "No space left on
# device"; a rerun needs far less, so this warns and goes on.
need_gib=16
# The checkout's disk and the caches' (pip's and cargo's, under $HOME): the smaller counts.
free_gib=$(df -Pk . "${HOME:-.}" 2>/dev/null | awk 'NR > 1 { g = int($4 / 1048576); if (m == "" || g < m) m = g } END { print m }' || true)
if [[ -n $free_gib && $free_gib -lt $need_gib ]]; then
  echo "run-all: warning: ${free_gib} GiB free on this disk; a full run from a clean checkout needs about ${need_gib} GiB" >&2
fi

total=${#plan[@]}
step_no=0
current="setup"
t_start=$(date +%s)
t_step=$t_start
results=()
skipped_names=()
step_result=""

on_failure() {
  echo
  echo "==================== summary ===================="
  if [[ ${#results[@]} -gt 0 ]]; then printf '%s\n' "${results[@]}"; fi
  echo "[$step_no/$total] $current: FAILED"
  echo "run-all: FAILED at step [$step_no/$total] $current"
}
trap on_failure ERR

# Marks the running step as skipped, with the reason (printed once, and in the summary).
skip() {
  echo "run-all: skipping: $1"
  step_result="skipped ($1)"
}

# `need TOOL HINT`: true if TOOL is on PATH, else skips the step naming TOOL and how to get it.
need() {
  if command -v "$1" >/dev/null 2>&1; then return 0; fi
  skip "$1 not found; $2"
  return 1
}

# Whether a nightly toolchain is there; if not, skips the step.
nightly_or_skip() {
  if command -v rustup >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
    return 0
  fi
  skip "no nightly toolchain; install one with 'rustup toolchain install nightly'"
  return 1
}

# ---------------------------------------------------------------------------------------------
# The interpreter of the Python suite (and of pyo3's builds)

# $PYTHON, pyenv's newest 3.11, or python3.11 on PATH.
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
  echo "run-all: no CPython 3.11 found (install it, e.g. with pyenv, or set PYTHON to a CPython 3.9-3.13)" >&2
  return 1
}

# The steps that need the interpreter: the Python suite's, and every cargo build with the pyo3
# feature (pyo3's build script asks an interpreter; its test binaries link libpython). The other
# steps (fmt, layers, no-std, abi, msrv, ...) run on a machine without CPython 3.9-3.13.
PY_STEPS=" clippy test-all warnings cudarc doc package valgrind mutants python candle asan-python stubs newcomer instructions abi3 "
py_ready=0
# Finds the interpreter and points pyo3's builds and the test binaries at it, once.
setup_python() {
  [[ $py_ready -eq 1 ]] && return 0
  PY=$(find_python)
  py_minor=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  case "$py_minor" in
    3.9 | 3.10 | 3.11 | 3.12 | 3.13) ;;
    *) echo "run-all: $PY is CPython $py_minor; the suite runs under 3.9-3.13" >&2; return 1 ;;
  esac
  echo "run-all: using $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  export PYTHON="$PY"
  if [[ $py_minor == 3.11 ]]; then venv=.venv; else venv=.venv-$py_minor; fi
  # pyo3 builds against `python3` unless told otherwise; point it at the same interpreter.
  if [[ -z "${PYO3_PYTHON:-}" ]]; then
    export PYO3_PYTHON="$PY"
  fi
  # Test binaries built with the pyo3 feature link libpython; a shared one (pyenv's) lives
  # outside the default library path.
  py_libdir=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
  if [[ -n "$py_libdir" ]]; then
    export LD_LIBRARY_PATH="$py_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  py_ready=1
}

# ---------------------------------------------------------------------------------------------
# The steps: one function `step_ID` for each entry of STEPS, in tests/steps/

# Every feature of the workspace's packages but `candle` and `burn` (about 230 crates, built,
# linted and tested by the `candle` step alone): what the other steps pass where
# `--all-features` would pull them into every build. `features_but_heavy dlpack-rs` names that package's only.
features_but_heavy() {
  local manifest name f list=()
  for manifest in dlpack-rs/Cargo.toml tests/pyext/Cargo.toml tests/pytwin/Cargo.toml \
    examples/image-demo/Cargo.toml; do
    name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)
    [[ $# -eq 0 || " $* " == *" $name "* ]] || continue
    for f in $(sed -n '/^\[features\]/,/^\[/s/^\([a-z0-9_-]*\) = .*/\1/p' "$manifest"); do
      [[ $f == default || $f == candle || $f == burn ]] || list+=("$name/$f")
    done
  done
  (IFS=,; echo "${list[*]}")
}

# shellcheck source=tests/steps/rust.sh
source tests/steps/rust.sh
# shellcheck source=tests/steps/tools.sh
source tests/steps/tools.sh
# shellcheck source=tests/steps/python.sh
source tests/steps/python.sh

# ---------------------------------------------------------------------------------------------

for s in "${plan[@]}"; do
  IFS='|' read -r id tiers title <<<"$s"
  step_no=$((step_no + 1))
  current="$title"
  step_result=""
  t_step=$(date +%s)
  echo
  echo "==> [$step_no/$total] $title  (--step $id)"
  if [[ $PY_STEPS == *" $id "* ]]; then setup_python; fi
  "step_$id"
  took=$(($(date +%s) - t_step))
  results+=("[$step_no/$total] $id: ${step_result:-ok} (${took}s)")
  echo "--> ${step_result:-ok} (${took}s)"
  if [[ -n $step_result ]]; then skipped_names+=("$id"); fi
done

trap - ERR
echo
echo "==================== summary ===================="
printf '%s\n' "${results[@]}"
took=$(($(date +%s) - t_start))
tier="all"
if [[ ${#selected[@]} -gt 0 ]]; then tier="selected"; elif [[ $quick -eq 1 ]]; then tier="quick"; fi
if [[ ${#skipped_names[@]} -eq 0 ]]; then
  echo "run-all: PASSED, $tier $total steps, in ${took}s"
else
  echo "run-all: PASSED $((total - ${#skipped_names[@]})) of $total ($tier) steps; skipped or partial: ${skipped_names[*]} (see above), in ${took}s"
fi
