#!/usr/bin/env bash
# The GPU check: one short script for a machine with an NVIDIA GPU (not part of run-all.sh, which
# runs the synthetic device tests everywhere). Builds the test extension into its own venv with
# a CUDA build of torch, then runs tests/gpu/check.py: torch CUDA tensors into Rust (through
# torch's exchange table, the producer's stream handed on) and back to torch (same device
# pointer), numpy refusing device memory, and a write made on a side stream that the consumer
# sees after the documented synchronisation, and the cudarc paths (a CudaSlice exported to torch,
# torch tensors read and written through cudarc views with event ordering).
#
# Needs: an NVIDIA driver, Rust stable, CPython 3.11 (PYTHON=... to choose), network access to
# the package registries. Well under five minutes on a warm machine (torch is the download).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-$(command -v python3.11 || command -v python3)}
venv=target/gpu-venv
if [[ ! -x $venv/bin/python ]]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --progress-bar on maturin pytest numpy torch
"$venv/bin/python" -c 'import torch; assert torch.cuda.is_available(), "no CUDA device visible to torch"; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))'
# cudarc's bindings for CUDA 12.8's driver API, loaded at run time: whatever nvcc the machine
# has (cudarc refuses toolkit versions newer than it knows), any driver from 12.8 on.
export CUDARC_CUDA_VERSION=${CUDARC_CUDA_VERSION:-12080}
libdir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" \
  "$venv/bin/maturin" develop --release -m tests/pyext/Cargo.toml --features cudarc
cd tests/python
"../../$venv/bin/python" ../gpu/check.py
