# shellcheck shell=bash
# The steps of tests/run-all.sh that run an outside tool over the Rust code: gcc against the
# official dlpack.h, valgrind, AddressSanitizer, libFuzzer and cargo-mutants.
#
# Sourced by run-all.sh, not run on its own. Each step is a function `step_ID` for the entry ID
# of run-all.sh's STEPS table; it runs in the repository root under run-all.sh's
# `set -Eeuo pipefail`, with its helpers (skip, need, nightly_or_skip) and variables ($PY,
# $venv, $py_minor, step_result).

step_abi() {
  need gcc "install gcc (it compiles the official dlpack.h)" || return 0
  bash tests/abi/check.sh
}

step_valgrind() {
  need valgrind "install valgrind" || return 0
  local features bins=() found
  for features in "" "--features=$(features_but_heavy dlpack-rs)"; do
    # shellcheck disable=SC2086 # $features is one flag or none
    cargo test -p dlpack-rs $features --no-run
    # shellcheck disable=SC2086
    mapfile -t found < <(cargo test -p dlpack-rs $features --no-run --message-format=json 2>/dev/null \
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
    if [[ ${#found[@]} -eq 0 ]]; then
      echo "no test binaries found for dlpack-rs ${features:-(no features)}" >&2
      return 1
    fi
    bins+=("${found[@]}")
  done
  # One binary per core at a time (valgrind runs a program on one core); each prints its name
  # before its run; every binary runs, and any failure (named) fails the step (xargs: 123). Four unit tests compare safe arithmetic
  # (stride walks, the overlap decision) with an enumeration over thousands of layouts: no
  # allocation or pointer of theirs is new to valgrind, and under it they took most of the step
  # (about 50 of 130 s). They run natively in test-all and under AddressSanitizer.
  printf '%s\0' "${bins[@]}" | xargs -0 -n 1 -P "$(nproc 2>/dev/null || echo 1)" sh -c '
    echo "valgrind: $1"
    valgrind --quiet --leak-check=full --error-exitcode=1 --suppressions=tests/valgrind.supp "$1" -q \
      --skip safe::strided::tests::the_bit_set_walk_reaches_exactly_the_addressed_offsets_once_in_order \
      --skip safe::strided::tests::the_reached_walk_visits_every_addressed_offset_and_no_other \
      --skip safe::overlap::tests::agrees_with_enumeration \
      --skip safe::overlap::tests::the_walk_is_bounded_and_then_conservative \
      || { echo "valgrind: FAILED: $1" >&2; exit 1; }' valgrind-one
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
  # The same harness runs on stable in dlpack-rs/tests/safe/fuzz_regressions.rs (kept inputs and a
  # bounded pseudo-random run); this step explores further with libFuzzer and ASan.
  nightly_or_skip || return 0
  local tools="$PWD/target/tools"
  if ! cargo fuzz --version >/dev/null 2>&1 && [[ ! -x "$tools/bin/cargo-fuzz" ]]; then
    echo "installing cargo-fuzz into target/tools (inside this checkout, ignored by git; nothing"
    echo "is installed anywhere else; delete target/tools to remove it)"
    # Unoptimised, as cargo-mutants (the fuzzing itself is the target's, built by it).
    cargo install --debug --locked --quiet --root "$tools" cargo-fuzz
  fi
  # libFuzzer's fork mode, one job per core (at most 4): on 2 cores 40 s run about as many
  # inputs as 60 s of one process did (about 2.4 million). Fork mode merges a kept corpus
  # (fuzz/corpus, not committed) without failing on an input that crashes, and by default
  # counts a job's out-of-memory or timeout without failing: the corpus is replayed first in
  # one process, and ooms and timeouts (10 s an input) fail the run like crashes.
  local seconds=${FUZZ_SECONDS:-40} jobs log="$PWD/target/fuzz-import_validator.log" last
  jobs=$(nproc 2>/dev/null || echo 1)
  if ((jobs > 4)); then jobs=4; fi
  fuzz_failed() {
    tail -n 30 "$log" >&2
    echo "the fuzzer found a failing input ($1): copy it from fuzz/artifacts/import_validator/" >&2
    echo "into fuzz/regressions/ (replayed by dlpack-rs/tests/safe/fuzz_regressions.rs) and fix it" >&2
  }
  if [[ -d fuzz/corpus/import_validator ]]; then
    echo "libFuzzer: replaying the kept corpus (fuzz/corpus/import_validator)"
    if ! (cd fuzz && PATH="$tools/bin:$PATH" cargo +nightly fuzz run import_validator -- \
      -runs=0 -timeout=10 >"$log" 2>&1); then
      fuzz_failed "a kept corpus input"
      return 1
    fi
  fi
  echo "libFuzzer for ${seconds}s, $jobs jobs; its log: target/fuzz-import_validator.log"
  if ! (cd fuzz && PATH="$tools/bin:$PATH" cargo +nightly fuzz run import_validator -- \
    -fork="$jobs" -ignore_crashes=0 -ignore_ooms=0 -ignore_timeouts=0 -timeout=10 \
    -max_total_time="$seconds" >"$log" 2>&1); then
    fuzz_failed "a crash, an out-of-memory or a timeout"
    return 1
  fi
  # The last progress line: inputs run, coverage, and oom/timeout/crash counts (all 0, or fail).
  last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -n 1 || true)
  echo "${last:-$(tail -n 2 "$log")}"
  if [[ -z $last || ! $last =~ oom/timeout/crash:\ 0/0/0 ]]; then
    fuzz_failed "no progress line, or one counting an oom, a timeout or a crash"
    return 1
  fi
}

step_mutants() {
  # Mutation testing: cargo-mutants changes one operator or function body at a time in the files
  # that decide who may touch which bytes (the borrow registry, layout validation, the view
  # guards, the ranges exports register, the checks and borrows of a view of an owner or of a
  # described tensor) and runs the Rust tests of every feature that needs no Python against each
  # change.
  # A change no test notices ("missed") fails the step unless tests/mutants/equivalent.txt lists
  # it with the reason it cannot change behaviour. Bounded (about 8 minutes on 2 cores): those
  # files only, the unit tests and the integration tests of those files only (no doctests), no
  # debug info, 10 s per mutant's tests, one build at a time.
  local tools="$PWD/target/tools" version=27.1.0
  if ! "$tools/bin/cargo-mutants" mutants --version 2>/dev/null | grep -qx "cargo-mutants $version"; then
    echo "installing cargo-mutants $version into target/tools (inside this checkout, ignored by"
    echo "git; nothing is installed anywhere else; delete target/tools to remove it)"
    # Unoptimised (--debug): half the install's time (about 55 s instead of 115 s on 2 cores),
    # and the tool's own work is small beside the builds and tests it runs.
    if ! cargo install --debug --locked --quiet --root "$tools" "cargo-mutants@$version"; then
      skip "cargo-mutants $version could not be installed (offline?)"
      return 0
    fi
  fi
  local files args=() tests=() f out=target/mutants status=0
  # The default set: tests/run-all.sh's header and README.md name the same files.
  local default="safe/borrow/mod.rs safe/borrow/overlap.rs safe/layout/mod.rs safe/borrow/guard.rs"
  default+=" safe/layout/tensor_info.rs safe/import/described.rs safe/import/views.rs safe/export/copy.rs"
  default+=" safe/export/block.rs"
  read -r -a files <<<"${MUTANTS_FILES:-$default}"
  for f in "${files[@]}"; do args+=(--file "dlpack-rs/src/$f"); done
  if [[ -z ${MUTANTS_FILES:-} ]]; then
    # The test targets that exercise these files: the unit tests and dlpack-rs/tests/safe, one
    # binary. Each mutant's build builds them and nothing else (`--cargo-arg` reaches the build
    # as well as the test run; after `--` they reach the test run only, and the build made every
    # test target of the package). A test of these files belongs in one of them.
    tests=(--cargo-arg=--lib --cargo-arg=--test --cargo-arg=safe)
  else
    tests=(--cargo-arg=--lib --cargo-arg=--tests)
  fi
  rm -rf "$out"
  # Each run mutates a fresh copy of the tree; its builds go to one target directory kept
  # between runs (so that only dlpack-rs itself is rebuilt), without debug info (faster links),
  # and incremental whatever the run's default: each mutant changes one function, and
  # rebuilding only what it touched takes about 1.5 s a mutant (a run without incremental
  # builds took more than twice as long, partly on a loaded machine).
  PATH="$tools/bin:$PATH" CARGO_TARGET_DIR="$PWD/target/mutants-build" \
    CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0 CARGO_INCREMENTAL=1 \
    cargo mutants -p dlpack-rs --features std,half,float8,num-complex,ndarray "${args[@]}" \
    --jobs 1 --timeout 10 --output "$out" "${tests[@]}" || status=$?
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
