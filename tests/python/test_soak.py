"""Soak: many export -> consume -> drop and import -> drop cycles across numpy, torch and
Rust, with nothing lost: every deleter called exactly once (counted), Python refcounts and
torch use counts back to their start, resident memory flat.

The cycle count defaults to a modest 20000 (about a second or two); set DLPACK_SOAK_CYCLES to
run longer (the issue's soak is 1000000).

Leaks are counted first: the test extension's global allocator counts its live Rust heap
blocks (the library's export blocks and shape arrays among them), which after the warm-up must
not grow over the cycles (a block leaked per cycle shows as thousands). RSS is a coarse second
check: after a warm-up of a tenth of the cycles, resident memory may grow by at most
16 MiB over the rest. Every cycle creates about 24 KiB of tensors (4 KiB buffers exported and
imported in several ways), so leaking any one of them per cycle exceeds the bound by far at
the default count (18000 * 4 KiB = 70 MiB), while allocator noise stays well below it.
"""

import gc
import os
import sys

import numpy as np

import dlpack_testext as ext
from conftest import needs_torch, torch

CYCLES = int(os.environ.get("DLPACK_SOAK_CYCLES", "20000"))
RSS_BOUND = 16 * 2**20
N = 1024  # float32 elements: 4 KiB per buffer


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_torch
def test_soak_export_import_cycles():
    a = np.arange(N, dtype=np.float32)
    x = torch.arange(N, dtype=torch.float32)
    payload = a.tobytes()
    a_refs, x_uses = sys.getrefcount(a), x._use_count()
    gc.collect()
    created0, dropped0 = ext.counters()
    expected_sum = int(sum(payload))

    def cycle(i):
        # Export (Rust -> Python): a Rust-owned buffer, its storage counted by the extension.
        t = ext.RustTensor(payload, "float32", [N])
        n = np.from_dlpack(t)
        tt = torch.from_dlpack(t)
        cap = t.__dlpack__(max_version=(1, 3))  # never consumed: the destructor frees it
        legacy = t.__dlpack__()
        if i % 2:
            info = ext.inspect(t)  # consumed by Rust, dropped at once
            assert info["numel"] == N
        del cap, legacy, n, tt, t
        # Import (Python -> Rust -> drop), with and without the GIL on the dropping side.
        assert ext.inspect(a)["numel"] == N
        assert ext.inspect(x)["numel"] == N
        if i % 16 == 0:
            assert ext.checksum_detached(a) == expected_sum
            h = ext.hold(x)
            h.release_on_thread()

    warmup = max(CYCLES // 10, 100)
    for i in range(warmup):
        cycle(i)
    gc.collect()
    base = rss()
    blocks0, bytes0 = ext.rust_heap()
    for i in range(warmup, CYCLES):
        cycle(i)
    gc.collect()
    grown = rss() - base
    blocks, nbytes = ext.rust_heap()

    created, dropped = ext.counters()
    assert created - created0 == CYCLES  # one Rust storage per cycle ...
    assert dropped - dropped0 == CYCLES  # ... each dropped exactly once by its deleter
    assert sys.getrefcount(a) == a_refs  # numpy's deleter released every import
    assert x._use_count() == x_uses  # torch's deleter released every import
    # A few blocks of slack for lazily grown caches; a leak per cycle is thousands.
    assert blocks - blocks0 <= 16, f"{blocks - blocks0} Rust heap blocks leaked"
    assert nbytes - bytes0 <= 64 * 1024, f"{nbytes - bytes0} bytes of Rust heap leaked"
    assert grown < RSS_BOUND, f"RSS grew by {grown / 2**20:.1f} MiB over {CYCLES - warmup} cycles"
