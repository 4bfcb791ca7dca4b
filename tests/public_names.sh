#!/usr/bin/env bash
# Counts the public names of `dlpack_rs` as ARCHITECTURE.md defines them: the items rustdoc's
# all-items page lists for a build with every feature (structs, enums, traits, functions,
# macros, type aliases, constants, statics, modules' items; `#[doc(hidden)]` ones excluded),
# plus the public methods and associated items on their pages. Usage: tests/public_names.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}/public-names
cargo doc -p dlpack-rs --all-features --no-deps --target-dir "$target" -q 2>/dev/null
python3 - "$target/doc/dlpack_rs" <<'PY'
import html, pathlib, re, sys
root = pathlib.Path(sys.argv[1])
page = (root / "all.html").read_text()
items = sorted(set(re.findall(r'<li><a href="([^"]+)">', page)))
methods = 0
for href in items:
    if re.search(r'/(struct|enum|trait)\.', "/" + href):
        text = (root / href).read_text()
        # Inherent and trait-declared items with their own anchor (`method.x`, `associatedconstant.x`, ...).
        own = text.split('id="trait-implementations"')[0]
        methods += len(set(re.findall(r'id="((?:ty)?method|associatedconstant|associatedtype|variant)\.([A-Za-z0-9_]+)"', own)))
print(f"public items: {len(items)}")
print(f"their methods, variants and associated items: {methods}")
PY
