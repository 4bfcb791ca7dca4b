#!/usr/bin/env bash
# The C ABI proof: compiles tests/abi/layout.c against the official dlpack.h (fetched from
# the apache-tvm-ffi wheel at test time, never committed), then runs the Rust side,
# dlpack-rs/tests/abi_layout.rs, which compares its own sizes, alignments, field offsets and
# constants with what the C compiler printed and fails on any difference.
#
# Then it proves the comparison can fail: it feeds the Rust test a copy of the C output with
# one constant and one offset changed, and requires that run to fail.
#
# Environment:
#   DLPACK_HEADER_WHEEL  pip requirement of the wheel that ships the header
#                        (default: a pinned apache-tvm-ffi release whose header is DLPack 1.3)
#   PYTHON               the Python used for `pip download` (default: python3.11, else python3)
set -euo pipefail
cd "$(dirname "$0")/../.."

wheel_req="${DLPACK_HEADER_WHEEL:-apache-tvm-ffi==0.1.15.post2}"
cache=".cache/abi"
out="$cache/out"
mkdir -p "$cache/wheel" "$out"

py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
fi

header="$cache/dlpack.h"
stamp="$cache/dlpack.h.source"
if [[ ! -s "$header" || "$(cat "$stamp" 2>/dev/null)" != "$wheel_req" ]]; then
  echo "abi: fetching dlpack.h from the $wheel_req wheel"
  rm -f "$cache"/wheel/*.whl "$header"
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$cache/wheel" "$wheel_req"
  whl=$(ls "$cache"/wheel/*.whl | head -n1)
  # Python's zipfile, not unzip (one tool fewer to install).
  "$py" -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("tvm_ffi/include/dlpack/dlpack.h"))' "$whl" "$header"
  echo "$wheel_req" >"$stamp"
fi

major=$(sed -nE 's/^#define DLPACK_MAJOR_VERSION ([0-9]+).*/\1/p' "$header")
minor=$(sed -nE 's/^#define DLPACK_MINOR_VERSION ([0-9]+).*/\1/p' "$header")
echo "abi: header is DLPack $major.$minor"
if [[ "$major.$minor" != "1.3" ]]; then
  echo "abi: expected a DLPack 1.3 header, got $major.$minor" >&2
  exit 1
fi

# Every enumerator (kDL...) and every version / flag macro the header defines.
{
  grep -oE '\bkDL[A-Za-z0-9_]+[[:space:]]*=' "$header" | sed -E 's/[[:space:]]*=$//' | sort -u
  grep -oE '^#define (DLPACK_MAJOR_VERSION|DLPACK_MINOR_VERSION|DLPACK_FLAG_BITMASK_[A-Z0-9_]+)\b' "$header" \
    | awk '{print $2}' | sort -u
} | sed -E 's/.*/CONST(&);/' >"$out/consts.inc"
echo "abi: $(wc -l <"$out/consts.inc") constants in the header"

cp tests/abi/layout.c "$out/layout.c"
gcc -std=c11 -Wall -Wextra -Werror -I "$cache" -I "$out" "$out/layout.c" -o "$out/layout"
"$out/layout" >"$out/c.txt"
echo "abi: C side: $(wc -l <"$out/c.txt") facts"

c_file="$(pwd)/$out/c.txt"
rust_file="$(pwd)/$out/rust.txt"
DLPACK_ABI_C_OUTPUT="$c_file" DLPACK_ABI_RUST_OUTPUT="$rust_file" \
  cargo test -q -p dlpack-rs --test abi_layout -- --ignored --nocapture

# The comparison must be able to fail: corrupt one constant and one offset.
bad="$(pwd)/$out/c-corrupted.txt"
sed -E -e 's/^const kDLCUDA 2$/const kDLCUDA 99/' -e 's/^offset DLTensor.ndim 16$/offset DLTensor.ndim 20/' \
  "$c_file" >"$bad"
if cmp -s "$c_file" "$bad"; then
  echo "abi: could not build the corrupted C output (format changed?)" >&2
  exit 1
fi
if DLPACK_ABI_C_OUTPUT="$bad" cargo test -q -p dlpack-rs --test abi_layout -- --ignored >"$out/negative.log" 2>&1; then
  echo "abi: the Rust test accepted a corrupted C output; the comparison is broken" >&2
  cat "$out/negative.log" >&2
  exit 1
fi
echo "abi: a corrupted C output is rejected, as it must be"
echo "abi: OK, the Rust ABI matches dlpack.h $major.$minor"
