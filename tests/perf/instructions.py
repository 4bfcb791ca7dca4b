"""Instruction counts per call (callgrind), the deterministic guard of the per-call costs that
BENCHMARKS.md measures in time: an export (`np.from_dlpack` of a derived class), a numpy import
and a torch import (through torch's exchange table), each `N` calls of a fixed 1-element input
inside a Rust loop of the test extension (`count_export`, ...), whose `#[pyfunction]` wrapper's
inclusive cost callgrind reports (the linker may fold the three identical loops into one body;
the wrappers stay apart). Times vary on a shared machine; these counts do not.

Run by `tests/run-all.sh --step instructions`: `python tests/perf/instructions.py run` under
callgrind (collection only inside the loops), then `... check callgrind.out` compares the counts
with tests/perf/budgets.json and fails when one grows more than 10% over its budget (a count
well under its budget is reported, so the budget can be lowered with it).
"""

import json
import pathlib
import re
import subprocess
import sys

N = 2000
CASES = [
    "count_export",
    "count_numpy_import",
    "count_torch_import",
    "count_typed_numpy_import",
    "count_typed_numpy_import_mut",
    "count_typed_torch_import",
    "count_torch_import3",
    "count_typed_torch_import3",
    "count_strided_numpy_import",
    "count_strided_torch_import",
    # rust-numpy's own views, whose borrows go through this crate's implementation of its
    # table (the process's, as in the suite): the table's cost per borrow.
    "count_rust_numpy_import",
    "count_rust_numpy_import_mut",
    # A new 1-element `Export` returned to torch (`Returned<Torch>`: torch's exchange table),
    # its tensor freed by the loop: about two thirds of it is torch's own (making and freeing
    # the tensor).
    "count_returned_torch",
]
# Ours against rust-numpy's view of the same array: the comparison BENCHMARKS.md makes in time,
# made here in instructions, deterministically (reported, not checked).
REFERENCES = {
    "count_rust_numpy_import": "count_typed_numpy_import",
    "count_rust_numpy_import_mut": "count_typed_numpy_import_mut",
}
BUDGETS = pathlib.Path(__file__).with_name("budgets.json")
SLACK = 1.10


def run():
    import numpy as np
    import torch

    import dlpack_testext as ext

    obj = ext.derived_vector([1.0])
    arr = np.ones(1, dtype=np.float32)
    t = torch.ones(1, dtype=torch.float32)
    t2 = torch.ones(1, dtype=torch.float32)
    t3 = torch.ones(1, dtype=torch.float32)
    loops = [
        (ext.count_export, np.from_dlpack, (obj,)),
        (ext.count_numpy_import, ext.numel, (arr,)),
        (ext.count_torch_import, ext.numel, (t,)),
        (ext.count_typed_numpy_import, ext.typed_numel, (arr,)),
        (ext.count_typed_numpy_import_mut, ext.typed_numel_mut, (arr,)),
        (ext.count_typed_torch_import, ext.typed_numel, (t,)),
        (ext.count_torch_import3, ext.numel3, (t, t2, t3)),
        (ext.count_typed_torch_import3, ext.typed_numel3, (t, t2, t3)),
        # A strided (transposed) 2-D view argument: TensorView<f32, Dims<2>>.
        (ext.count_strided_numpy_import, ext.tv_sum2, (np.ones((2, 2), dtype=np.float32).T,)),
        (ext.count_strided_torch_import, ext.tv_sum2, (torch.ones(2, 2).t(),)),
        (ext.count_rust_numpy_import, ext.rust_numpy_numel, (arr,)),
        (ext.count_rust_numpy_import_mut, ext.rust_numpy_numel_mut, (arr,)),
        (ext.count_returned_torch, ext.returned_torch, ()),
    ]
    # Every case warmed up before instrumentation starts (the step starts callgrind with
    # --instr-atstart=no: this part runs uninstrumented, about twice as fast): a case's first
    # calls may pay one-time work (rust-numpy's first view imports numpy's C API, about 370,000
    # instructions, which spread over the loop read as 180 per call), and none of it is per call.
    for loop, f, args in loops:
        loop(f, args, 50)
    ext.start_instrumentation()
    for loop, f, args in loops:
        loop(f, args, N)
        # The numpy cases assume this crate's rust-numpy table (made by the first numpy
        # import, before any rust-numpy view asked for one): rust-numpy's own would add its
        # borrows to every typed numpy case and count its table, not ours, for rust-numpy's.
        if hasattr(np._core.multiarray, "_RUST_NUMPY_BORROW_CHECKING_API"):
            assert hasattr(np._core.multiarray, "_DLPACK_RS_REGISTRY_BORROWS"), (
                "rust-numpy's own table is the process's: the counts would measure it")


def counts(path):
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
        capture_output=True, text=True, check=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s.*__pyfunction_(" + "|".join(CASES) + r")\b", line)
        if m and m.group(2) not in found:
            found[m.group(2)] = int(m.group(1).replace(",", ""))
    return found


def check(path):
    budgets = json.loads(BUDGETS.read_text())
    found = counts(path)
    failed = False
    for case in CASES:
        if case not in found:
            print(f"instructions: no count for {case} in {path}", file=sys.stderr)
            failed = True
            continue
        per_call = found[case] / N
        budget = budgets[case]
        ratio = per_call / budget
        verdict = "ok" if ratio <= SLACK else "OVER BUDGET"
        print(f"instructions: {case}: {per_call:,.0f} per call, budget {budget:,} ({ratio:.2f}x) {verdict}")
        if ratio < 0.8:
            print(f"instructions:   well under budget: lower it in {BUDGETS.name}")
        failed |= ratio > SLACK
    for reference, ours in REFERENCES.items():
        if reference not in found or ours not in found:
            continue  # reported missing above
        theirs = found[reference] / N
        print(f"instructions: {ours}: {found[ours] / found[reference]:.2f}x rust-numpy's view "
              f"({reference}: {theirs:,.0f} per call)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    {"run": run, "check": lambda: check(sys.argv[2])}[sys.argv[1]]()
