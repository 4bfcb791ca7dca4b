# shellcheck shell=bash
# The cargo steps of tests/run-all.sh: format, lints, the Rust tests, builds under each feature
# set, docs, packaging, the Rust version and the free-threaded build.
#
# Sourced by run-all.sh, not run on its own. Each step is a function `step_ID` for the entry ID
# of run-all.sh's STEPS table; it runs in the repository root under run-all.sh's
# `set -Eeuo pipefail`, with its helpers (skip, need, nightly_or_skip) and variables ($PY,
# $venv, $py_minor, step_result).

step_fmt() {
  cargo fmt --version >/dev/null 2>&1 || { skip "rustfmt not installed; 'rustup component add rustfmt'"; return 0; }
  cargo fmt --all --check
}

step_clippy() {
  cargo clippy --version >/dev/null 2>&1 || { skip "clippy not installed; 'rustup component add clippy'"; return 0; }
  cargo clippy --workspace --all-targets --features "$(features_but_heavy)" -- -D warnings
}

step_test-all() {
  cargo test --workspace --features "$(features_but_heavy)"
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
  # path into the layers above them (pyo3_glue, into_dlpack, derive_support, cuda, the Python
  # or CUDA parts of interop/). So do the Rust-only parts of interop/ that safe/ re-exports
  # (interop/ndarray/, interop/safetensors.rs).
  local src=dlpack-rs/src found
  found=$(grep -rnE 'feature *= *"(pyo3|abi3)"|pyo3::|pyo3_glue|into_dlpack|derive_support|__private_derive|crate::cuda|interop::(image|cudarc)|IntoDLPack' \
    --include='*.rs' "$src/ffi.rs" "$src/safe" "$src/interop/ndarray" "$src/interop/safetensors.rs" \
    | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n "$found" ]]; then
    echo "ffi.rs, safe/ and interop's Rust-only parts must not reach Python or the layers above (ARCHITECTURE.md):" >&2
    echo "$found" >&2
    return 1
  fi
  echo "ffi.rs and safe/ stay below the Python glue"
  # Files above the derive's support module use the items it re-exports from where they live.
  found=$(grep -rnE '__private_derive|derive_support' --include='*.rs' "$src/into_dlpack.rs" \
    "$src/pyo3_glue" "$src/interop" | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n "$found" ]]; then
    echo "derive_support.rs is the top layer: nothing below it imports from it (ARCHITECTURE.md):" >&2
    echo "$found" >&2
    return 1
  fi
  # CPython's C API is called from pyo3_glue/runtime/cpython.rs only, but for the two C
  # interfaces that are their files' whole job (ARCHITECTURE.md).
  found=$(grep -rnE '\bffi::_?Py[A-Za-z_]*\(' --include='*.rs' "$src" \
    | grep -vE "^$src/pyo3_glue/(runtime/cpython|export/dlpack_method|numpy/borrow)\.rs:" \
    | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n "$found" ]]; then
    echo "raw CPython calls outside pyo3_glue/runtime/cpython.rs (ARCHITECTURE.md):" >&2
    echo "$found" >&2
    return 1
  fi
  echo "CPython's C API is called from pyo3_glue/runtime/cpython.rs (and the two C interfaces)"
  # No folder of the glue names interop/ (the foreign libraries sit above the glue).
  found=$(grep -rnE 'crate::interop|crate::cuda' --include='*.rs' "$src/pyo3_glue" \
    | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [[ -n "$found" ]]; then
    echo "pyo3_glue/ must not use interop/, which sits above it (ARCHITECTURE.md):" >&2
    echo "$found" >&2
    return 1
  fi
  echo "interop/ sits above the glue"
  # The floors of safe/ (dtype < error < borrow < layout < import < export < packed) and of
  # pyo3_glue/ (runtime < export < numpy < import), read from the sources by a test that needs
  # no features: a path or a re-exported name of a higher floor fails it.
  cargo test -q -p dlpack-rs --test layers
  echo "safe/ and pyo3_glue/: each folder uses only the floors below it"
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
  RUSTDOCFLAGS="-Dwarnings" cargo doc --workspace --features "$(features_but_heavy)" --no-deps
  if command -v rustup >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "docs.rs build (nightly, --cfg docsrs: feature badges)"
    RUSTDOCFLAGS="-Dwarnings --cfg docsrs" cargo +nightly doc -p dlpack-rs --features "$(features_but_heavy dlpack-rs)" --no-deps \
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
  # Any python3 reads the metadata (this step needs no CPython 3.9-3.13 of the Python suite).
  local py=${PY:-python3}
  need "$py" "install python3 (it reads cargo metadata)" || return 0
  # Features cudarc and image have a Rust version of their own (README: Rust version), checked
  # apart; candle's (it also turns on features of half and float8) and burn's from their own
  # resolves.
  cargo metadata --format-version 1 --features "$(features_but_heavy)" -q \
    | "$py" -c "$msrv_check" "$declared" '{"cudarc": [1, 88], "image": [1, 88]}'
  cargo metadata --format-version 1 --features dlpack-rs/candle -q \
    | "$py" -c "$msrv_check" 1.89 '{}'
  cargo metadata --format-version 1 --features dlpack-rs/burn -q \
    | "$py" -c "$msrv_check" 1.95 '{}'
}

# Reads `cargo metadata` on stdin: the dependencies of our crates need at most Rust argv[1],
# those of each package named in the JSON argv[2] at most its own version.
msrv_check='
import json, sys
declared = tuple(int(x) for x in sys.argv[1].split("."))
m = json.load(sys.stdin)
ours = {"dlpack-rs", "dlpack-rs-derive"}
nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
pkgs = {p["id"]: p for p in m["packages"]}
own_msrv = {k: tuple(v) for k, v in json.loads(sys.argv[2]).items()}
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
'

step_free-threaded() {
  # No free-threaded CPython can be installed here: check against its build configuration
  # (Py_GIL_DISABLED), so that the pyo3 layer keeps compiling for it.
  PYO3_CONFIG_FILE="$PWD/tests/free-threaded/pyo3-config-3.14t.txt" \
    cargo check -p dlpack-rs -p dlpack-testext -p image-demo --all-targets \
    --features dlpack-rs/pyo3,dlpack-rs/derive,dlpack-rs/ndarray,dlpack-rs/image,dlpack-rs/safetensors,dlpack-rs/half,dlpack-rs/float8,dlpack-rs/num-complex \
    --target-dir target/free-threaded
}
