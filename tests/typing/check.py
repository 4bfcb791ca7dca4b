"""The image demo's type stubs, checked (tests/run-all.sh --step stubs, after the stubs were
generated into target/stubs):

1. the committed `_native.pyi` is the generated one (regenerate with the command below);
2. the committed `_dlpack.pyi` is `dlpack_rs::pyo3_glue::TYPING_STUB`, the protocols the
   generated hints refer to;
3. mypy accepts the stub package itself (as a source, for the oldest Python the demo
   mypy checks (3.10): installed packages' errors are not reported) and tests/typing/caller.py, whose
   one wrong call must be rejected (its `type: ignore[arg-type]` must be used), and rejects the
   same file without that ignore, naming that call;
4. the caller runs: every function works at run time, and the wrong call raises TypeError.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "examples/image-demo/python/image_demo"
REGENERATE = (
    "DLPACK_RS_TYPING_MODULE=image_demo._dlpack maturin generate-stubs "
    "-m examples/image-demo/Cargo.toml -F stubs --out target/stubs && "
    "cp target/stubs/image_demo/_native.pyi examples/image-demo/python/image_demo/"
)


def mypy(path, *flags):
    env_path = str(ROOT / "examples/image-demo/python")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--warn-unused-ignores", "--no-incremental",
         "--cache-dir", str(ROOT / "target/mypy-cache"), *flags, str(path)],
        capture_output=True, text=True, env={"MYPYPATH": env_path, "PATH": "/usr/bin:/bin"},
    )


def main():
    generated = (ROOT / "target/stubs/image_demo/_native.pyi").read_text()
    if (PACKAGE / "_native.pyi").read_text() != generated:
        sys.exit("stubs: examples/image-demo/python/image_demo/_native.pyi is not what "
                 "maturin generate-stubs writes now; regenerate it:\n  " + REGENERATE)
    source = (ROOT / "dlpack-rs/src/pyo3_glue/runtime/type_hints.rs").read_text()
    stub = re.search(r'TYPING_STUB: &str = r#"(.*?)"#;', source, re.S).group(1)
    if (PACKAGE / "_dlpack.pyi").read_text() != stub:
        sys.exit("stubs: examples/image-demo/python/image_demo/_dlpack.pyi differs from "
                 "dlpack_rs::pyo3_glue::TYPING_STUB (runtime/type_hints.rs): copy it over")
    stubs = mypy(PACKAGE, "--python-version", "3.10")
    if stubs.returncode != 0:
        sys.exit("stubs: mypy rejects the image demo's stubs themselves:\n" + stubs.stdout
                 + stubs.stderr)
    caller = ROOT / "tests/typing/caller.py"
    ok = mypy(caller)
    if ok.returncode != 0:
        sys.exit("stubs: mypy rejects tests/typing/caller.py:\n" + ok.stdout + ok.stderr)
    marker = "  # type: ignore[arg-type]"
    text = caller.read_text()
    assert text.count(marker) == 1
    line = text[: text.index(marker)].count("\n") + 1
    bare = ROOT / "target/stubs/caller_without_ignore.py"
    bare.write_text(text.replace(marker, ""))
    bad = mypy(bare)
    errors = [l for l in bad.stdout.splitlines() if ": error:" in l]
    if bad.returncode == 0 or len(errors) != 1 or f":{line}: error:" not in errors[0] \
            or '"invert"' not in errors[0] or "[arg-type]" not in errors[0]:
        sys.exit("stubs: the wrong call (tests/typing/caller.py line %d) must be the one error "
                 "mypy reports:\n%s" % (line, bad.stdout + bad.stderr))
    sys.path.insert(0, str(caller.parent))
    import caller as run  # the installed image demo, at run time

    run.luma_of_image(4, 6)
    run.invert_numpy()
    run.frameworks()
    try:
        run.rejected()
    except TypeError:
        pass
    else:
        sys.exit("stubs: the call mypy rejects ran without TypeError")
    print("stubs: generated stubs current; mypy accepts the typed caller and rejects "
          "line %d: %s" % (line, errors[0].split(": error: ")[1]))


if __name__ == "__main__":
    main()
