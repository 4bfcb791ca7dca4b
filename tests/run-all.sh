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
#   FUZZ_SECONDS  how long the libFuzzer run lasts (default 60, 15 with --quick)
#   MUTANTS_FILES the files (under dlpack-rs/src) the mutants step mutates; default
#                 "safe/borrow.rs safe/overlap.rs safe/layout.rs safe/guard.rs safe/tensor_info.rs". Other
#                 files are run against every test target (slower): "safe/managed_views.rs ffi.rs"
set -Eeuo pipefail
cd "$(dirname "$0")/.."

# id | tiers | title
STEPS=(
  "fmt|quick|cargo fmt --all --check"
  "clippy|quick|cargo clippy --workspace --all-targets --all-features -- -D warnings"
  "layers|quick|ARCHITECTURE.md's layer rule: ffi.rs and safe/ know nothing of Python or the layers above"
  "test-all|quick|cargo test --workspace --all-features (unit, integration, doc, trybuild)"
  "test-none|quick|cargo test -p dlpack-rs (no features)"
  "test-derive|full|cargo test -p dlpack-rs --features derive (the derive alone: its UI cases)"
  "warnings|full|a dependency's build: dlpack-rs's library under each documented feature, alone and with pyo3, prints no warning"
  "no-std|full|no_std: dlpack-rs builds without features and has no dependencies"
  "cudarc|full|feature cudarc without CUDA: cargo check, its unit tests and doctests, the GPU check's extension"
  "doc|full|cargo doc --workspace --all-features --no-deps (warnings are errors; docs.rs badges on nightly)"
  "package|full|cargo package of both crates, and a build of what would be uploaded"
  "msrv|full|rust-version: what the dependencies need, and clippy's incompatible_msrv"
  "free-threaded|full|free-threaded CPython 3.14: cargo check of the pyo3 layer, the test extension and the example"
  "abi|full|C ABI: dlpack_rs::ffi vs the official dlpack.h, compiled with gcc"
  "valgrind|quick|valgrind: dlpack-rs test binaries (no features, all features)"
  "asan|full|AddressSanitizer: dlpack-rs test binaries (nightly -Zsanitizer=address, without Python)"
  "fuzz|quick|fuzz: the import validator under cargo-fuzz (nightly)"
  "mutants|full|cargo-mutants on the borrow registry, layout, view guards and export ranges: each mutant caught or listed equivalent"
  "python|quick|Python interop suite (venv, maturin, pytest)"
  "stubs|full|the image demo's stubs: generated (maturin generate-stubs, feature stubs) as committed, and mypy on a typed caller"
  "newcomer|full|the README's extension module, built from README.md as written, used from numpy"
  "instructions|full|instruction counts per call (callgrind) against tests/perf/budgets.json"
  "abi3|full|abi3: one wheel, the numpy part of the interop suite under CPython 3.9-3.13 (pyenv)"
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
if [[ $quick -eq 1 ]]; then FUZZ_SECONDS=${FUZZ_SECONDS:-15}; fi

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

PY=$(find_python)
py_minor=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$py_minor" in
  3.9 | 3.10 | 3.11 | 3.12 | 3.13) ;;
  *) echo "run-all: $PY is CPython $py_minor; the suite runs under 3.9-3.13" >&2; exit 1 ;;
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

# ---------------------------------------------------------------------------------------------
# The steps

step_fmt() {
  cargo fmt --version >/dev/null 2>&1 || { skip "rustfmt not installed; 'rustup component add rustfmt'"; return 0; }
  cargo fmt --all --check
}

step_clippy() {
  cargo clippy --version >/dev/null 2>&1 || { skip "clippy not installed; 'rustup component add clippy'"; return 0; }
  cargo clippy --workspace --all-targets --all-features -- -D warnings
}

step_test-all() {
  cargo test --workspace --all-features
}

step_test-none() {
  cargo test -p dlpack-rs
}

step_test-derive() {
  # The build a derive-only user has (no pyo3, no ndarray): the UI cases' expected errors differ.
  cargo test -p dlpack-rs --features derive
}

step_warnings() {
  # Users build this crate under the feature sets README documents; clippy sees only all of them
  # at once, where a warning of one set (an import only another feature uses) hides. Every
  # feature alone, and each with pyo3 (the Python users' base), must build without a warning.
  local features=(std pyo3 half float8 num-complex derive ndarray image safetensors inspect abi3 cudarc)
  local sets=("" "${features[@]}") f out bad=0
  for f in half float8 num-complex derive ndarray image safetensors cudarc; do sets+=("pyo3,$f"); done
  sets+=("pyo3,derive,ndarray")
  for f in "${sets[@]}"; do
    out=$(cargo check -q -p dlpack-rs --lib --no-default-features --features "$f" \
      --message-format short 2>&1) || { echo "$out" >&2; return 1; }
    if grep -q "warning" <<<"$out"; then
      echo "features [$f]: the build warns:" >&2
      echo "$out" >&2
      bad=1
    else
      echo "features [$f]: no warning"
    fi
  done
  return $bad
}

step_cudarc() {
  # cudarc loads the driver at run time: all of this builds (and the tests that need no GPU
  # run) on a machine without CUDA. The GPU itself is tests/gpu/run.sh.
  cargo check -p dlpack-rs --features cudarc
  # Warnings are errors (a feature combination of its own).
  cargo clippy -p dlpack-rs --features cudarc -- -D warnings
  cargo test -p dlpack-rs --features cudarc,pyo3 --lib cuda
  cargo test -p dlpack-rs --features cudarc,pyo3 --doc cuda
  cargo check -p dlpack-testext --features cudarc
}

step_layers() {
  # ffi.rs and safe/ sit below the Python glue: no pyo3, no cfg(feature = "pyo3") or "abi3", no
  # path into the layers above them (pyo3_glue, into_dlpack, derive_support, cuda).
  local found
  found=$(grep -nE 'feature *= *"(pyo3|abi3)"|pyo3::|pyo3_glue|into_dlpack|derive_support|__private_derive|crate::cuda|IntoDLPack' \
    dlpack-rs/src/ffi.rs dlpack-rs/src/safe/*.rs | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n "$found" ]]; then
    echo "ffi.rs and safe/ must not reach Python or the layers above (ARCHITECTURE.md):" >&2
    echo "$found" >&2
    return 1
  fi
  echo "ffi.rs and safe/ stay below the Python glue"
  # Files above the derive's support module use the items it re-exports from where they live.
  found=$(grep -nE '__private_derive|derive_support' dlpack-rs/src/into_dlpack.rs \
    dlpack-rs/src/pyo3_glue/*.rs dlpack-rs/src/cuda.rs | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n "$found" ]]; then
    echo "derive_support.rs is the top layer: nothing below it imports from it (ARCHITECTURE.md):" >&2
    echo "$found" >&2
    return 1
  fi
  # CPython's C API is called from pyo3_glue/cpython.rs only, but for the two C interfaces that
  # are their files' whole job (ARCHITECTURE.md).
  found=$(grep -nE '\bffi::_?Py[A-Za-z_]*\(' dlpack-rs/src/pyo3_glue/*.rs dlpack-rs/src/*.rs \
    | grep -vE '^dlpack-rs/src/pyo3_glue/(cpython|dlpack_method|numpy_borrow)\.rs:' \
    | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n "$found" ]]; then
    echo "raw CPython calls outside pyo3_glue/cpython.rs (ARCHITECTURE.md):" >&2
    echo "$found" >&2
    return 1
  fi
  echo "CPython's C API is called from pyo3_glue/cpython.rs (and the two C interfaces)"
}

step_no-std() {
  # Without features the crate is #![no_std]: any use of std would not compile.
  cargo build -p dlpack-rs --no-default-features
  local deps
  deps=$(cargo tree -p dlpack-rs --no-default-features -e normal --prefix none | sed 1d | sed '/^$/d')
  if [[ -n "$deps" ]]; then
    echo "dlpack-rs without features must have no dependencies, but has:" >&2
    echo "$deps" >&2
    return 1
  fi
  echo "no dependencies"
  # The element-type features keep the core no_std: neither they nor their dependencies turn on
  # a `std` feature.
  local with_std
  with_std=$(cargo tree -p dlpack-rs --no-default-features --features half,float8,num-complex \
    -e normal,features --prefix none | grep -E '^[a-z0-9_-]+ feature "std"' | sort -u || true)
  if [[ -n "$with_std" ]]; then
    echo "features half, float8, num-complex must not enable std, but:" >&2
    echo "$with_std" >&2
    return 1
  fi
  echo "half, float8, num-complex enable no std"
}

step_doc() {
  RUSTDOCFLAGS="-Dwarnings" cargo doc --workspace --all-features --no-deps
  if command -v rustup >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "docs.rs build (nightly, --cfg docsrs: feature badges)"
    RUSTDOCFLAGS="-Dwarnings --cfg docsrs" cargo +nightly doc -p dlpack-rs --all-features --no-deps \
      --target-dir target/docsrs
  else
    echo "no nightly toolchain: the docs.rs build (--cfg docsrs) is not checked"
    step_result="partial (no nightly: docs.rs build unchecked)"
  fi
}

step_package() {
  cargo package -p dlpack-rs -p dlpack-rs-derive --allow-dirty --no-verify
  # What `cargo publish` would upload, unpacked and built on its own with every feature, the
  # runtime resolving the derive from the unpacked sources instead of the registry.
  local dir=target/package-check version
  version=$(sed -nE '0,/^version = "([^"]+)"/s//\1/p' Cargo.toml)
  rm -rf "$dir"
  mkdir -p "$dir/user/src"
  tar -xzf "target/package/dlpack-rs-$version.crate" -C "$dir"
  tar -xzf "target/package/dlpack-rs-derive-$version.crate" -C "$dir"
  cat >"$dir/Cargo.toml" <<'EOF'
[workspace]
resolver = "2"
members = ["user"]

[patch.crates-io]
dlpack-rs = { path = "dlpack-rs-VERSION" }
dlpack-rs-derive = { path = "dlpack-rs-derive-VERSION" }
EOF
  cat >"$dir/user/Cargo.toml" <<'EOF'
[package]
name = "package-check"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
dlpack-rs = { version = "=VERSION", features = ["pyo3", "derive", "ndarray", "half", "float8", "num-complex"] }
pyo3 = "0.30"
EOF
  sed -i "s/VERSION/$version/g" "$dir/Cargo.toml" "$dir/user/Cargo.toml"
  cat >"$dir/user/src/lib.rs" <<'EOF'
//! Uses the packaged crates as a user would: a derived pyclass with its own methods.
use dlpack_rs::IntoDLPack;
use pyo3::prelude::*;

#[pyclass(frozen)]
#[derive(IntoDLPack)]
pub struct Image {
    #[dlpack(data)]
    pixels: dlpack_rs::safe::AlignedBuffer<u8>,
}

#[dlpack_rs::pymethods]
impl Image {
    #[new]
    fn new(len: usize) -> PyResult<Self> {
        Ok(Image { pixels: dlpack_rs::safe::AlignedBuffer::zeroed(len)? })
    }
}
EOF
  cp Cargo.lock "$dir/Cargo.lock"
  (cd "$dir" && cargo check --quiet)
  echo "both crates package, and the packaged sources build on their own"
}

step_msrv() {
  # rust-version is what the dependencies need; clippy's incompatible_msrv lint (in the clippy
  # step) checks our std API use against it. No older toolchain can be had here, so language
  # features newer than it are not caught by a build.
  local declared
  declared=$(sed -nE 's/^rust-version = "([0-9.]+)"/\1/p' Cargo.toml)
  cargo metadata --format-version 1 --all-features -q | "$PY" -c '
import json, sys
declared = tuple(int(x) for x in sys.argv[1].split("."))
m = json.load(sys.stdin)
ours = {"dlpack-rs", "dlpack-rs-derive"}
nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
pkgs = {p["id"]: p for p in m["packages"]}
# Features cudarc and image have a Rust version of their own (README: Rust version), checked apart.
own_msrv = {"cudarc": (1, 88), "image": (1, 88)}
def closure(roots, stop):
    """The normal (non-dev) dependency closure of `roots`, not entering packages in `stop`."""
    todo, seen = list(roots), set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        for d in nodes[i]["deps"]:
            if pkgs[d["pkg"]]["name"] in stop:
                continue
            if any(k["kind"] in (None, "build") for k in d["dep_kinds"]):
                todo.append(d["pkg"])
    return seen
def needs(ids):
    worst = []
    for i in ids:
        p = pkgs[i]
        rv = p.get("rust_version")
        if rv and p["name"] not in ours:
            worst.append((tuple(int(x) for x in rv.split(".")[:2]), p["name"], p["version"]))
    return sorted(worst)
worst = needs(closure([i for i, p in pkgs.items() if p["name"] in ours], set(own_msrv)))
top = worst[-1]
print("rust-version %s; the most demanding dependency: %s %s needs %s" % (sys.argv[1], top[1], top[2], ".".join(map(str, top[0]))))
for name, version in own_msrv.items():
    roots = [i for i, p in pkgs.items() if p["name"] == name]
    extra = [w for w in needs(closure(roots, set())) if w[0] > version]
    if extra:
        print("feature %s needs more than the Rust %s its documentation says:" % (name, ".".join(map(str, version))), extra, file=sys.stderr)
        sys.exit(1)
    print("feature %s: Rust %s (its own dependencies)" % (name, ".".join(map(str, version))))
bad = [w for w in worst if w[0] > declared[:2]]
if bad:
    print("dependencies need a newer Rust than rust-version:", bad, file=sys.stderr)
    sys.exit(1)
' "$declared"
}

step_free-threaded() {
  # No free-threaded CPython can be installed here: check against its build configuration
  # (Py_GIL_DISABLED), so that the pyo3 layer keeps compiling for it.
  PYO3_CONFIG_FILE="$PWD/tests/free-threaded/pyo3-config-3.14t.txt" \
    cargo check -p dlpack-rs -p dlpack-testext -p image-demo --all-targets \
    --features dlpack-rs/pyo3,dlpack-rs/derive,dlpack-rs/ndarray,dlpack-rs/image,dlpack-rs/safetensors,dlpack-rs/half,dlpack-rs/float8,dlpack-rs/num-complex \
    --target-dir target/free-threaded
}

step_abi() {
  need gcc "install gcc (it compiles the official dlpack.h)" || return 0
  bash tests/abi/check.sh
}

step_valgrind() {
  need valgrind "install valgrind" || return 0
  local features bins bin
  for features in "" "--all-features"; do
    # shellcheck disable=SC2086 # $features is one flag or none
    cargo test -p dlpack-rs $features --no-run
    # shellcheck disable=SC2086
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
      return 1
    fi
    for bin in "${bins[@]}"; do
      echo "valgrind ${features:-(no features)}: $(basename "$bin")"
      valgrind --quiet --leak-check=full --error-exitcode=1 --suppressions=tests/valgrind.supp "$bin" -q
    done
  done
}

step_asan() {
  # Miri cannot be installed here; ASan (with LeakSanitizer) checks every test of the core,
  # the borrow registry's threads included. The pyo3 feature is left out (libpython is not
  # instrumented); the Python suite runs under the same code paths.
  nightly_or_skip || return 0
  local host
  host=$(rustc -vV | sed -n 's/^host: //p')
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" RUSTFLAGS="-Zsanitizer=address" \
    cargo +nightly test -p dlpack-rs --features std,half,float8,num-complex,ndarray,image,safetensors \
    --target "$host" --target-dir target/asan --lib --tests
}

step_fuzz() {
  # The same harness runs on stable in dlpack-rs/tests/fuzz_regressions.rs (kept inputs and a
  # bounded pseudo-random run); this step explores further with libFuzzer and ASan.
  nightly_or_skip || return 0
  local tools="$PWD/target/tools"
  if ! cargo fuzz --version >/dev/null 2>&1 && [[ ! -x "$tools/bin/cargo-fuzz" ]]; then
    echo "installing cargo-fuzz into target/tools (inside this checkout, ignored by git; nothing"
    echo "is installed anywhere else; delete target/tools to remove it)"
    cargo install --locked --quiet --root "$tools" cargo-fuzz
  fi
  local seconds=${FUZZ_SECONDS:-60} log="$PWD/target/fuzz-import_validator.log"
  echo "libFuzzer for ${seconds}s; its log: target/fuzz-import_validator.log"
  if ! (cd fuzz && PATH="$tools/bin:$PATH" cargo +nightly fuzz run import_validator -- \
    -max_total_time="$seconds" >"$log" 2>&1); then
    tail -n 30 "$log" >&2
    echo "the fuzzer found a crash: copy the input from fuzz/artifacts/import_validator/ into" >&2
    echo "fuzz/regressions/ (replayed by dlpack-rs/tests/fuzz_regressions.rs) and fix it" >&2
    return 1
  fi
  grep -E '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs)' "$log" | tail -n 2 || tail -n 2 "$log"
}

step_mutants() {
  # Mutation testing: cargo-mutants changes one operator or function body at a time in the files
  # that decide who may touch which bytes (the borrow registry, layout validation, the view
  # guards, the ranges exports register) and runs the Rust tests of every feature that needs no Python against each change.
  # A change no test notices ("missed") fails the step unless tests/mutants/equivalent.txt lists
  # it with the reason it cannot change behaviour. Bounded (about 5 minutes on 2 busy cores): those
  # files only, the unit tests and the integration tests of those files only (no doctests), no
  # debug info, 10 s per mutant's tests, one build at a time.
  local tools="$PWD/target/tools" version=27.1.0
  if ! "$tools/bin/cargo-mutants" mutants --version 2>/dev/null | grep -qx "cargo-mutants $version"; then
    echo "installing cargo-mutants $version into target/tools (inside this checkout, ignored by"
    echo "git; nothing is installed anywhere else; delete target/tools to remove it)"
    if ! cargo install --locked --quiet --root "$tools" "cargo-mutants@$version"; then
      skip "cargo-mutants $version could not be installed (offline?)"
      return 0
    fi
  fi
  local files args=() tests=() f out=target/mutants status=0
  read -r -a files <<<"${MUTANTS_FILES:-safe/borrow.rs safe/overlap.rs safe/layout.rs safe/guard.rs safe/tensor_info.rs}"
  for f in "${files[@]}"; do args+=(--file "dlpack-rs/src/$f"); done
  if [[ -z ${MUTANTS_FILES:-} ]]; then
    # The test targets that exercise these files (each mutant relinks every target it runs:
    # the fewer, the faster). A test of them in a new file belongs in this list.
    tests=(--lib)
    for f in safe_borrow safe_view_ranges safe_layout_bounds safe_accessors safe_import_validation \
      safe_roundtrip ndarray_views fuzz_regressions; do
      tests+=(--test "$f")
    done
  else
    tests=(--lib --tests)
  fi
  rm -rf "$out"
  # Each run mutates a fresh copy of the tree; its builds go to one target directory kept
  # between runs (so that only dlpack-rs itself is rebuilt), without debug info (faster links).
  PATH="$tools/bin:$PATH" CARGO_TARGET_DIR="$PWD/target/mutants-build" \
    CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0 \
    cargo mutants -p dlpack-rs --features std,half,float8,num-complex,ndarray "${args[@]}" \
    --jobs 1 --timeout 10 --output "$out" -- "${tests[@]}" || status=$?
  # 0: every mutant caught; 2: some missed; 3: some hung (a timeout counts as caught).
  case $status in
    0 | 2 | 3) ;;
    *)
      echo "cargo-mutants failed (exit $status); its log: $out/mutants.out/debug.log" >&2
      return 1
      ;;
  esac
  "$PY" tests/mutants/check.py "$out/mutants.out" tests/mutants/equivalent.txt
}

step_python() {
  if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == tuple(map(int, sys.argv[1].split(".")))' "$py_minor" 2>/dev/null; then
    echo "creating $venv with $PY"
    rm -rf "$venv"
    "$PY" -m venv "$venv"
  fi
  if "$venv/bin/python" -c 'import pytest, numpy, torch, jax, pyarrow, array_api_strict, safetensors' 2>/dev/null \
    && [[ -x $venv/bin/maturin ]]; then
    echo "Python packages already installed in $venv"
  else
    echo "installing Python packages into $venv: maturin, pytest, numpy, torch, jax, pyarrow,"
    echo "array-api-strict, safetensors (pinned in tests/python/constraints.txt for CPython 3.11). torch is"
    echo "several GB with its CUDA libraries (about two minutes on a fast link)."
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --progress-bar on -c tests/python/constraints.txt \
      maturin pytest numpy torch "jax[cpu]" pyarrow array-api-strict safetensors
  fi
  "$venv/bin/python" -c 'import numpy, torch, jax, pyarrow, array_api_strict as s, sys
print("CPython", sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__,
      "jax", jax.__version__, "pyarrow", pyarrow.__version__, "array-api-strict", s.__version__)'
  VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
    "$venv/bin/maturin" develop --release -m tests/pyext/Cargo.toml
  # A second extension module with its own copy of dlpack-rs: the suite checks that the two
  # share one borrow registry.
  VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
    "$venv/bin/maturin" develop --release -m examples/image-demo/Cargo.toml
  # A third, small one (tests/pytwin) carries the test extension's cross-module functions, so
  # that every scenario between two copies of the crate runs in both orders.
  VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
    "$venv/bin/maturin" develop --release -m tests/pytwin/Cargo.toml
  local report=target/pytest-report.xml
  mkdir -p target
  "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider -rs --junitxml="$report"
  # Every peer is installed here, so a skipped test means one did not import: that must fail,
  # not pass (tests/python/allowed_skips.txt names the only exceptions).
  "$PY" - "$report" tests/python/allowed_skips.txt <<'EOF'
import sys
import xml.etree.ElementTree as ET

allowed = {l.split("#")[0].strip() for l in open(sys.argv[2])} - {""}
skipped = []
for case in ET.parse(sys.argv[1]).iter("testcase"):
    if case.find("skipped") is not None:
        skipped.append(case.get("classname", "") + "::" + case.get("name", ""))
unexpected = [s for s in skipped if s not in allowed]
print("python: %d skipped (%d allowed by name)" % (len(skipped), len(skipped) - len(unexpected)))
if unexpected:
    print("unexpected skips (a peer that does not import?):", *unexpected[:20], sep="\n  ", file=sys.stderr)
    sys.exit(1)
EOF
}

step_stubs() {
  if [[ ! -x $venv/bin/maturin ]]; then
    skip "no maturin in $venv: run the python step first"
    return 0
  fi
  "$venv/bin/python" -m pip install --quiet -c tests/python/constraints.txt mypy
  rm -rf target/stubs
  # The hints name the protocols of the demo's own stub module (type_hints.rs).
  DLPACK_RS_TYPING_MODULE=image_demo._dlpack PYO3_PYTHON="$PWD/$venv/bin/python" \
    "$venv/bin/maturin" generate-stubs --quiet -m examples/image-demo/Cargo.toml -F stubs \
    -i "$venv/bin/python" --out target/stubs
  "$venv/bin/python" tests/typing/check.py
}

step_newcomer() {
  if [[ ! -x $venv/bin/maturin ]]; then
    skip "no maturin in $venv: run the python step first"
    return 0
  fi
  "$venv/bin/python" tests/newcomer.py "$venv"
}

step_instructions() {
  need valgrind "install valgrind" || return 0
  need callgrind_annotate "it comes with valgrind" || return 0
  if ! "$venv/bin/python" -c 'import dlpack_testext, numpy, torch' 2>/dev/null; then
    skip "the test extension is not built in $venv: run the python step first"
    return 0
  fi
  # Collection only inside the three measured loops: the interpreter's and torch's start-up
  # run uninstrumented (about a minute under valgrind all the same).
  local out=target/callgrind.instructions.out
  PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no \
    --toggle-collect='*hardening::count_*' \
    --callgrind-out-file="$out" "$venv/bin/python" tests/perf/instructions.py run \
    >target/callgrind.instructions.log 2>&1 || { tail -n 20 target/callgrind.instructions.log >&2; return 1; }
  "$venv/bin/python" tests/perf/instructions.py check "$out"
}

step_abi3() {
  local status=0
  MATURIN="$PWD/$venv/bin/maturin" bash tests/abi3-matrix.sh || status=$?
  case $status in
    0) ;;
    3) step_result="skipped (no CPython 3.9-3.13 from pyenv to run)" ;;
    4) step_result="partial ($(cat target/abi3-matrix/missing))" ;;
    *) return "$status" ;;
  esac
}

# ---------------------------------------------------------------------------------------------

for s in "${plan[@]}"; do
  IFS='|' read -r id tiers title <<<"$s"
  step_no=$((step_no + 1))
  current="$title"
  step_result=""
  t_step=$(date +%s)
  echo
  echo "==> [$step_no/$total] $title  (--step $id)"
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
