#!/usr/bin/env bash
# One abi3 wheel, every CPython from 3.9 to 3.13: builds the interop extension (tests/pyext)
# once with dlpack-rs feature `abi3` (pyo3's stable ABI, Python >= 3.9), and the image-demo
# example the same way (the suite checks that two extension modules share one borrow
# registry), then for each interpreter pyenv has, makes a small venv (numpy and pytest only),
# installs those single wheels and runs the interop suite's numpy part (tests/python: the
# tests that need torch, jax, pyarrow, array-api-strict or safetensors skip with "needs <peer>"),
# and the whole suite under one version (below).
#
# Every skip is checked: its reason must be "needs <peer>" for a peer that really does not
# import in that venv, or "needs numpy >= 2.1" where numpy is older (2.0 under CPython 3.9);
# any other skip fails the run. Each version's counts are printed.
#
# Interpreters pyenv lacks are skipped with a message; 3.9 and 3.13 are required whenever
# pyenv has them. Exit status: 0 every version ran, 3 none could run (no pyenv, or none of the
# versions), 4 some were missing (named in target/abi3-matrix/missing); anything else failed.
#
# One version also gets every peer (torch, jax, pyarrow, array-api-strict, safetensors), so the
# whole suite, not only its numpy part, runs against the abi3 wheel: the version of PEERS_FROM,
# a venv that has them all (run-all.sh passes the Python suite's), whose packages that
# version's venv sees through a .pth file instead of downloading them again (torch is several
# GB); without one, 3.13, which gets them installed.
#
# Environment:
#   MATURIN     the maturin to use (default: .venv/bin/maturin, else maturin on PATH)
#   PEERS_FROM  a venv with every peer installed (optional, see above)
set -euo pipefail
cd "$(dirname "$0")/.."

versions=(3.9 3.10 3.11 3.12 3.13)
# The version that gets every peer, not only numpy (torch has no wheels for 3.9): PEERS_FROM's
# when it has them all (checked below), else 3.13.
peers_on=3.13
peers_site=""
peer_modules="torch, jax, pyarrow, array_api_strict, safetensors"
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

if [[ -n ${PEERS_FROM:-} ]]; then
  if "$PEERS_FROM/bin/python" -c "import numpy, pytest, xdist, $peer_modules" 2>/dev/null; then
    from_minor=$("$PEERS_FROM/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [[ -n ${found[$from_minor]:-} ]]; then
      peers_on=$from_minor
      # Both site directories (one line each in the .pth file) where they differ.
      peers_site=$("$PEERS_FROM/bin/python" -c 'import sysconfig
p = sysconfig.get_paths()
print("\n".join(dict.fromkeys([p["purelib"], p["platlib"]])))')
      echo "abi3-matrix: [$peers_on] every peer from $PEERS_FROM (a .pth file, nothing downloaded)"
    else
      echo "abi3-matrix: pyenv has no CPython $from_minor (PEERS_FROM's): $peers_on gets every peer installed"
    fi
  else
    echo "abi3-matrix: $PEERS_FROM lacks numpy, pytest, pytest-xdist or a peer ($peer_modules):"
    echo "abi3-matrix: $peers_on gets them installed"
  fi
fi

# Build once, with the oldest interpreter found (the wheel's tag is cp39-abi3 regardless).
builder=""
for minor in "${versions[@]}"; do
  if [[ -n "${found[$minor]:-}" ]]; then builder=${found[$minor]}; break; fi
done
rm -rf "$work/wheel"
mkdir -p "$work/wheel"
echo "abi3-matrix: building the abi3 wheels of tests/pyext, examples/image-demo and tests/pytwin"
"$maturin" build --quiet --release -m tests/pyext/Cargo.toml --features abi3 \
  -i "$builder" --out "$work/wheel"
"$maturin" build --quiet --release -m examples/image-demo/Cargo.toml --features abi3 \
  -i "$builder" --out "$work/wheel"
"$maturin" build --quiet --release -m tests/pytwin/Cargo.toml --features abi3 \
  -i "$builder" --out "$work/wheel"
# The one abi3 wheel of distribution $1 in $work/wheel.
one_wheel() {
  local found=("$work"/wheel/"$1"-*-abi3-*.whl)
  if [[ ${#found[@]} -ne 1 || ! -f "${found[0]}" ]]; then
    echo "abi3-matrix: expected exactly one abi3 wheel of $1 in $work/wheel, got: ${found[*]}" >&2
    return 1
  fi
  echo "${found[0]}"
}
wheel=$(one_wheel dlpack_testext)
demo_wheel=$(one_wheel image_demo)
twin_wheel=$(one_wheel dlpack_twin)
echo "abi3-matrix: $(basename "$wheel"), $(basename "$demo_wheel"), $(basename "$twin_wheel")"

# pytest workers: one per core, at most 4; a test file's tests stay in one worker.
workers=$(nproc 2>/dev/null || echo 1)
if ((workers > 4)); then workers=4; fi
results=()
for minor in "${versions[@]}"; do
  py=${found[$minor]:-}
  [[ -z "$py" ]] && continue
  venv="$work/venv-$minor"
  if [[ $minor == "$peers_on" && -n $peers_site ]]; then
    # A bare venv that sees PEERS_FROM's packages after its own (the wheels installed below,
    # which the import check after them confirms are what the suite loads). A .pth file's
    # lines are appended to sys.path; .pth files in them are not read (so no editable
    # development install of PEERS_FROM's comes with them).
    if [[ ! -x "$venv/bin/python" || "$(cat "$venv/peers-from" 2>/dev/null)" != "$peers_site" ]]; then
      echo "abi3-matrix: [$minor] creating $venv (every package from $PEERS_FROM)"
      rm -rf "$venv"
      "$py" -m venv "$venv"
      echo "$peers_site" >"$venv/peers-from"
    fi
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$peers_site" >"$site/dlpack_rs_abi3_peers.pth"
  elif [[ ! -x "$venv/bin/python" || -f "$venv/peers-from" ]] || ! "$venv/bin/python" -c 'import numpy, pytest, xdist' 2>/dev/null; then
    echo "abi3-matrix: [$minor] creating $venv (numpy, pytest, pytest-xdist)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --progress-bar on numpy pytest pytest-xdist
  fi
  if [[ $minor == "$peers_on" ]] && ! "$venv/bin/python" -c "import $peer_modules" 2>/dev/null; then
    # The newest interpreter also gets every peer (pinned as for 3.11: the versions the
    # Compatibility table names), so the whole suite, not only its numpy part, runs there too.
    echo "abi3-matrix: [$minor] installing torch, jax, pyarrow, array-api-strict, safetensors (torch is several GB)"
    "$venv/bin/python" -m pip install --progress-bar on -c tests/python/constraints.txt \
      torch "jax[cpu]" pyarrow array-api-strict safetensors
  fi
  "$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$wheel" "$demo_wheel" "$twin_wheel"
  echo "abi3-matrix: [$minor] $("$venv/bin/python" -c 'import sys, numpy; print("CPython", sys.version.split()[0], "numpy", numpy.__version__)')"
  # The installed wheels, not development builds, must be what the suite imports.
  "$venv/bin/python" -c '
import pathlib, dlpack_testext, dlpack_twin, image_demo
for module, name in [(dlpack_testext, "dlpack_testext"), (dlpack_twin, "dlpack_twin"), (image_demo, "_native")]:
    libs = [p.name for p in pathlib.Path(module.__file__).parent.glob(name + "*.so")]
    assert libs == [name + ".abi3.so"], libs'
  log="$work/pytest-$minor.log"
  report="$work/pytest-$minor.xml"
  rm -f "$report"
  status=0
  "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider -rs --junitxml="$report" \
    -n "$workers" --dist loadfile \
    >"$log" 2>&1 || status=$?
  summary=$(tail -n1 "$log")
  echo "abi3-matrix: [$minor] $summary"
  if [[ $status -ne 0 ]] || ! grep -q " passed" <<<"$summary"; then
    echo "abi3-matrix: [$minor] FAILED (log: $log)" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  # Skips must be honest: each one says "needs <peer>" of a peer that really does not import
  # in this venv (tried as tests/python/conftest.py tries it). Any other skip (another
  # reason, an xfail, a peer that imports after all) fails.
  status=0
  "$venv/bin/python" - "$minor" "$report" <<'EOF' || status=$?
import collections
import importlib
import sys
import xml.etree.ElementTree as ET

import numpy

minor, report = sys.argv[1:]
missing = []
for peer in ("torch", "jax", "pyarrow", "array_api_strict", "safetensors"):
    try:
        importlib.import_module(peer)
    except ImportError:
        missing.append(peer)
allowed = {"needs " + peer for peer in missing}
# Every wheel here is abi3, which hides CPython's type version tags (conftest.py).
allowed.add("needs version tags (not abi3, CPython >= 3.11)")
# abi3 hides whether a thread holds the GIL (tests/python/test_keepalive_dropper.py).
allowed.add("needs the thread state (not abi3)")
# The one other reason (tests/python/conftest.py: needs_numpy_versioned), where it is true.
if numpy.lib.NumpyVersion(numpy.__version__) < "2.1.0":
    missing.append("numpy >= 2.1")
    allowed.add("needs numpy >= 2.1")
cases = list(ET.parse(report).iter("testcase"))
passed, skipped, bad = 0, collections.Counter(), []
for case in cases:
    name = case.get("classname", "") + "::" + case.get("name", "")
    outcome = [c for c in case if c.tag in ("skipped", "failure", "error")]
    if not outcome:
        passed += 1
        continue
    reason = outcome[0].get("message", "")
    if len(outcome) == 1 and outcome[0].tag == "skipped":
        skipped[reason] += 1
        if outcome[0].get("type") == "pytest.skip" and reason in allowed:
            continue
    bad.append("%s: %s %r" % (name, outcome[0].tag, reason))
by_reason = ", ".join("%d %s" % (n, r) for r, n in sorted(skipped.items()))
print("abi3-matrix: [%s] %d passed, %d skipped (%s; not installed: %s)"
      % (minor, passed, sum(skipped.values()), by_reason or "none", ", ".join(missing) or "none"))
if passed == 0:
    sys.exit("abi3-matrix: [%s] %s records no passed test" % (minor, report))
if bad:
    print("abi3-matrix: [%s] %d tests neither passed nor skipped for a missing peer:"
          % (minor, len(bad)), *bad[:40], sep="\n  ", file=sys.stderr)
    sys.exit(1)
EOF
  if [[ $status -ne 0 ]]; then
    echo "abi3-matrix: [$minor] FAILED (log: $log, report: $report)" >&2
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
