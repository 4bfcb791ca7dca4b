"""The README's newcomer path, run as written: takes the three blocks under "A complete extension
module" in README.md (Cargo.toml, pyproject.toml, src/lib.rs) into a fresh project in
target/newcomer, swaps only the git dependency for this checkout's path, builds it with maturin
into the given venv, and runs the Python line the README promises. Run by the test command's
`newcomer` step; fails if the README's example stops working.
"""

import os
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
readme = (root / "README.md").read_text()
section = readme.split("A complete extension module", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```(toml|rust)\n(.*?)```", section, re.S)
files = {}
for lang, body in blocks:
    first = body.splitlines()[0].strip()
    name = first.lstrip("#/ ").strip()
    files[name] = "\n".join(
        line for line in body.splitlines() if not line.startswith("# fn main")
    ) + "\n"
expected = {"Cargo.toml", "pyproject.toml", "src/lib.rs"}
assert set(files) == expected, f"README's newcomer blocks changed: {sorted(files)}"

project = root / "target" / "newcomer"
(project / "src").mkdir(parents=True, exist_ok=True)
cargo = files["Cargo.toml"]
git_dep = re.search(r'dlpack-rs = \{ git = "[^"]+", ', cargo)
assert git_dep, "the README's Cargo.toml no longer depends on dlpack-rs by git"
cargo = cargo.replace(git_dep.group(0), f'dlpack-rs = {{ path = "{root / "dlpack-rs"}", ')
# Its own workspace, so that it is built as a newcomer's project is, not as a member of ours.
cargo += "\n[workspace]\n"
(project / "Cargo.toml").write_text(cargo)
(project / "pyproject.toml").write_text(files["pyproject.toml"])
(project / "src" / "lib.rs").write_text(files["src/lib.rs"])

venv = pathlib.Path(sys.argv[1]).resolve()
env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
subprocess.run([str(venv / "bin" / "maturin"), "develop", "--release", "-m",
                str(project / "Cargo.toml")], check=True, env=env)
code = (
    "import numpy as np, my_tensors\n"
    "t = my_tensors.Tensor([2, 3])\n"
    "a = np.from_dlpack(t)\n"
    "assert a.shape == (2, 3) and a.dtype == np.float32 and not a.any(), a\n"
    "a[1, 2] = 5.0\n"
    "assert np.from_dlpack(t)[1, 2] == 5.0  # shared memory\n"
    "print('newcomer: README example builds and shares memory with numpy')\n"
)
subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, env=env)
