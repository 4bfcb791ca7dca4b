# shellcheck shell=bash
# The steps of tests/run-all.sh that need CPython: the interop suite, the image demo's stubs, the
# README's extension module, instruction counts and the abi3 matrix.
#
# Sourced by run-all.sh, not run on its own. Each step is a function `step_ID` for the entry ID
# of run-all.sh's STEPS table; it runs in the repository root under run-all.sh's
# `set -Eeuo pipefail`, with its helpers (skip, need, nightly_or_skip) and variables ($PY,
# $venv, $py_minor, step_result).

# The suite's venv with its packages (numpy, torch, jax, ...), made or completed as needed.
python_packages() {
  if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == tuple(map(int, sys.argv[1].split(".")))' "$py_minor" 2>/dev/null; then
    echo "creating $venv with $PY"
    rm -rf "$venv"
    "$PY" -m venv "$venv"
  fi
  if "$venv/bin/python" -c 'import pytest, xdist, numpy, torch, jax, pyarrow, array_api_strict, safetensors' 2>/dev/null \
    && [[ -x $venv/bin/maturin ]]; then
    echo "Python packages already installed in $venv"
  else
    echo "installing Python packages into $venv: maturin, pytest, pytest-xdist, numpy, torch, jax, pyarrow,"
    echo "array-api-strict, safetensors (pinned in tests/python/constraints.txt for CPython 3.11). torch is"
    echo "several GB with its CUDA libraries (about two minutes on a fast link)."
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --progress-bar on -c tests/python/constraints.txt \
      maturin pytest pytest-xdist numpy torch "jax[cpu]" pyarrow array-api-strict safetensors
  fi
}

step_python() {
  python_packages
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
  # A debug build's first numpy import in a fresh embedded interpreter (no module has looked
  # up rust-numpy's table yet), with the suite's packages on the path.
  PYTHONPATH="$PWD/$venv/lib/python$py_minor/site-packages" \
    cargo test -p dlpack-rs --features pyo3 --test numpy_embedded -- --ignored
  local report=target/pytest-report.xml
  mkdir -p target
  # One worker per core, at most 4 (each loads torch and jax), a test file's tests in one worker
  # (module state and teardown stay together): about 1.7x faster on 2 cores.
  local workers
  workers=$(nproc 2>/dev/null || echo 1)
  if ((workers > 4)); then workers=4; fi
  "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider -rs --junitxml="$report" \
    -n "$workers" --dist loadfile
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

step_asan-python() {
  # The pyo3 layer's own unsafe code (the numpy struct read, capsules, exchange tables,
  # keepalives, rust-numpy's table) under AddressSanitizer, driven by the whole interop suite
  # with the real numpy, torch and jax: the test extension is built with -Zsanitizer=address
  # (debug, sharing the asan step's dependencies) and imported ahead of the installed one. A
  # Python extension cannot carry its own sanitizer runtime: GCC's is preloaded, with libstdc++
  # (else jax's C++ exceptions find no `__cxa_throw` behind ASan's interceptor). An error stops
  # the process (the test fails) and its report is printed from target/asan-python.
  nightly_or_skip || return 0
  need gcc "install gcc (its AddressSanitizer runtime)" || return 0
  local runtime stdcxx host out=target/asan-python
  runtime=$(gcc -print-file-name=libasan.so)
  stdcxx=$(gcc -print-file-name=libstdc++.so)
  if [[ $runtime != /* || $stdcxx != /* ]]; then
    skip "gcc has no shared AddressSanitizer runtime (libasan.so)"
    return 0
  fi
  local installed
  if ! installed=$("$venv/bin/python" -c 'import dlpack_testext, os; print(os.path.dirname(dlpack_testext.__file__))' 2>/dev/null); then
    skip "the test extension is not built in $venv: run the python step first"
    return 0
  fi
  host=$(rustc -vV | sed -n 's/^host: //p')
  PYO3_PYTHON="$PWD/$venv/bin/python" RUSTFLAGS="-Zsanitizer=address" \
    cargo +nightly build -p dlpack-testext --target "$host" --target-dir target/asan
  rm -rf "$out"
  mkdir -p "$out/site/dlpack_testext"
  cp "$installed/__init__.py" "$out/site/dlpack_testext/"
  cp "target/asan/$host/debug/libdlpack_testext.so" \
    "$out/site/dlpack_testext/$(basename "$installed"/dlpack_testext*.so)"
  # PYTHONMALLOC=malloc: Python objects come from malloc too, so that a read of a freed object
  # (an array's struct after the array went) is a use after free ASan sees, not a read of
  # pymalloc's recycled memory (the suite takes about 50% longer).
  local env=(LD_PRELOAD="$runtime $stdcxx" PYTHONPATH="$PWD/$out/site" PYTHONMALLOC=malloc
    ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$PWD/$out/report")
  # The module imported is the instrumented one (an uninstrumented interpreter cannot even load
  # it without the runtime: its `__asan_*` symbols would be undefined).
  env "${env[@]}" "$venv/bin/python" -c 'import sys, dlpack_testext
assert dlpack_testext.__file__.startswith(sys.argv[1]), dlpack_testext.__file__' "$PWD/$out/site"
  # Leaks are the suite's own business (its heap counters); CPython leaks by design at exit. A test
  # asks for an allocation too large to make (allocator_may_return_null: MemoryError, not an
  # abort). The soak's bound on the process's memory does not hold under ASan, whose quarantine
  # keeps freed memory: it runs in the python step.
  local workers status=0
  workers=$(nproc 2>/dev/null || echo 1)
  if ((workers > 4)); then workers=4; fi
  # A sanitizer error ends its worker: no replacement (xdist's rescheduling after a crash can
  # wait forever), and a bound on the whole run all the same.
  env "${env[@]}" timeout 1200 "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider \
    -n "$workers" --dist loadfile --max-worker-restart=0 \
    --deselect tests/python/test_soak.py::test_soak_export_import_cycles || status=$?
  if compgen -G "$out/report.*" >/dev/null && grep -l 'ERROR: AddressSanitizer' "$out"/report.* >/dev/null; then
    grep -h -A40 'ERROR: AddressSanitizer' "$out"/report.* >&2
    return 1
  fi
  return "$status"
}

step_stubs() {
  if [[ ! -x $venv/bin/maturin ]]; then
    skip "no maturin in $venv: run the python step first"
    return 0
  fi
  "$venv/bin/python" -m pip install --quiet -c tests/python/constraints.txt mypy
  rm -rf target/stubs
  # The hints name the protocols of the demo's own stub module (runtime/type_hints.rs).
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
  if [[ $(uname -m) != x86_64 ]]; then
    # The script turns callgrind's instrumentation on with the x86-64 client request only.
    skip "instruction counts are taken on x86-64 only (budgets and the client request are its)"
    return 0
  fi
  need callgrind_annotate "it comes with valgrind" || return 0
  if ! "$venv/bin/python" -c 'import dlpack_testext, numpy, torch' 2>/dev/null; then
    skip "the test extension is not built in $venv: run the python step first"
    return 0
  fi
  # Collection only inside the measured loops; instrumentation only from just before them
  # (the script asks for it): the interpreter's and torch's start-up run uninstrumented (about
  # 45 s under valgrind all the same, 110 s instrumented).
  local out=target/callgrind.instructions.out
  PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
    --toggle-collect='*hardening::count_*' \
    --callgrind-out-file="$out" "$venv/bin/python" tests/perf/instructions.py run \
    >target/callgrind.instructions.log 2>&1 || { tail -n 20 target/callgrind.instructions.log >&2; return 1; }
  "$venv/bin/python" tests/perf/instructions.py check "$out"
}

step_abi3() {
  local status=0
  MATURIN="$PWD/$venv/bin/maturin" PEERS_FROM="$PWD/$venv" bash tests/abi3-matrix.sh || status=$?
  case $status in
    0) ;;
    3) step_result="skipped (no CPython 3.9-3.13 from pyenv to run)" ;;
    4) step_result="partial ($(cat target/abi3-matrix/missing))" ;;
    *) return "$status" ;;
  esac
}

step_candle() {
  # candle-core (about 140 crates) and burn-std (about 90) build here only: the other steps
  # name every feature but these two. Lint the code, then its tests with the real numpy, torch
  # and jax in an embedded interpreter that sees the suite's packages.
  python_packages
  local features=candle,burn,pyo3,derive,ndarray
  local tests=(--test candle --test candle_hardening --test burn)
  cargo clippy -p dlpack-rs --lib "${tests[@]}" --features $features -- -D warnings
  PYTHONPATH="$PWD/$venv/lib/python$py_minor/site-packages" \
    cargo test -p dlpack-rs --features $features "${tests[@]}"
  # The modules' examples and the guides' candle and burn sections (with the guides' others).
  cargo test -p dlpack-rs --features $features --doc -- candle burn GuideDoctests
}
