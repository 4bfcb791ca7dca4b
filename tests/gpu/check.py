"""What tests/gpu/run.sh runs on a GPU (see there). Prints one line per check; raises on the
first failure."""

import numpy as np
import torch

import dlpack_testext as ext

CUDA = 2


def check(name, condition):
    if not condition:
        raise AssertionError(name)
    print("ok  ", name)


dev = torch.device("cuda", 0)
x = torch.arange(16, dtype=torch.float32, device=dev)

# torch -> Rust through torch's exchange table: the device, the producer's stream handed on.
(device, producer_stream, host_view_refused) = ext.import_device(x, unsynchronized=True)
check("import: device is cuda:0", device == (CUDA, 0))
check("import: producer stream is torch's current stream",
      producer_stream == torch.cuda.current_stream(dev).cuda_stream)
check("import: no host view of device memory", host_view_refused)

# torch -> Rust -> torch: the same device pointer, no copy.
back = torch.from_dlpack(ext.reexport(x))
check("round trip: same device pointer", back.data_ptr() == x.data_ptr())
check("round trip: same values", torch.equal(back, x))

# numpy cannot take device memory.
try:
    np.from_dlpack(ext.reexport(x))
    check("numpy refuses a CUDA tensor", False)
except (RuntimeError, BufferError, ValueError):
    check("numpy refuses a CUDA tensor", True)

# A write on a side stream (torch's current stream while it runs), then an import asking for the
# consumer's stream: torch's __dlpack__(stream=...) makes the consumer's stream wait for its
# current stream, so a read on the consumer's stream sees the write.
side = torch.cuda.Stream(dev)
consumer = torch.cuda.current_stream(dev)
y = torch.zeros(1 << 20, device=dev)
with torch.cuda.stream(side):
    torch.cuda._sleep(50_000_000)  # keep the side stream busy
    y.fill_(7.0)
    ext.import_device(y, consumer.cuda_stream)  # __dlpack__(stream=consumer) synchronises
seen = torch.from_dlpack(ext.reexport(y))  # read on the consumer (current) stream
check("side-stream write visible after the documented sync", bool((seen == 7.0).all()))

# The exchange-table import hands the producer's stream on; ordering after it is the consumer's
# job (here: wait for it), and then the write is visible.
with torch.cuda.stream(side):
    torch.cuda._sleep(50_000_000)
    y.fill_(9.0)
    (_, stream, _) = ext.import_device(y, unsynchronized=True)
check("table import reports the side stream", stream == side.cuda_stream)
torch.cuda.ExternalStream(stream).synchronize()
check("after waiting on the reported stream the write is visible",
      bool((torch.from_dlpack(ext.reexport(y)) == 9.0).all()))

# The cudarc paths (the extension is built with its `cudarc` feature).
# Rust -> torch: a CudaSlice written on the extension's own non-blocking stream; torch's
# __dlpack__(stream=its current stream) call makes that stream wait for the write.
r = torch.from_dlpack(ext.cuda_arange(1 << 20))
check("cudarc export: torch sees the Rust write", torch.equal(r, torch.arange(1 << 20, dtype=torch.float32, device=dev)))
check("cudarc export: a CUDA tensor on device 0", r.device == dev)

# torch -> Rust: a write queued behind a long sleep on a side stream; CudaTensor::import takes the
# tensor through torch's table and orders the extension's stream after the side stream.
z = torch.zeros(1 << 20, device=dev)
with torch.cuda.stream(side):
    torch.cuda._sleep(50_000_000)
    z.fill_(2.0)
    total, ptr = ext.cuda_sum(z)
check("cudarc import: same device pointer", ptr == z.data_ptr())
check("cudarc import: the side-stream write is seen (event ordering)", total == 2.0 * (1 << 20))

# torch -> Rust, written there: the view is mutable, the write visible to torch afterwards.
ext.cuda_fill(z, 5.0)
check("cudarc mutable import: torch sees the Rust write", bool((z == 5.0).all()))
print("gpu check: all passed")
