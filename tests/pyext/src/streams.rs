//! Stream ordering of device exports without a GPU: buffers that claim a device (host memory,
//! never read there) and record what `StreamOrder::order_before` was asked, so the tests see
//! which stream value each route passes (`__dlpack__(stream=...)`, the C exchange table).

use std::sync::{Arc, Mutex};

use dlpack_rs::ffi::{DLDevice, DLDeviceType};
use dlpack_rs::pyo3_glue::DLPackTensor;
use dlpack_rs::safe::{Buffer, Error, Export, StreamOrder};
use pyo3::prelude::*;

/// The calls one export's order received: `(device_type, device_id, stream)`.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(i32, i32, i64)>>,
    fail: bool,
}

impl StreamOrder for Recorder {
    fn order_before(&self, device: DLDevice, consumer_stream: i64) -> Result<(), Error> {
        self.calls
            .lock()
            .unwrap()
            .push((device.device_type.0, device.device_id, consumer_stream));
        if self.fail {
            Err(Error::Device {
                call: "cuStreamWaitEvent",
                code: 700,
            })
        } else {
            Ok(())
        }
    }
}

/// What Python sees of a recorder.
#[pyclass(frozen)]
struct OrderCalls(Arc<Recorder>);

#[pymethods]
impl OrderCalls {
    fn calls(&self) -> Vec<(i32, i32, i64)> {
        self.0.calls.lock().unwrap().clone()
    }
}

/// Host bytes that claim to live on `device`, with a recording stream order.
struct ClaimedDevice {
    bytes: Vec<u8>,
    device: DLDevice,
    order: Arc<Recorder>,
}

// SAFETY: the Vec's heap buffer holds `len` initialised bytes and stays in place when the value
// moves; `Vec::as_ptr` carries write permission; nothing writes through `&self`; the answers
// never change. (The device is a claim for tests of arguments: the memory is host memory that
// the crate never reads on a non-CPU device.)
unsafe impl Buffer for ClaimedDevice {
    type Elem = u8;
    const SHARED_PTR_WRITABLE: bool = true;
    fn data_ptr(&self) -> *mut u8 {
        self.bytes.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.bytes.len()
    }
    fn device(&self) -> DLDevice {
        self.device
    }
    fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
        Some(self.order.clone())
    }
}

fn claimed(n: usize, device: (i32, i32), fail: bool) -> (ClaimedDevice, Arc<Recorder>) {
    let order = Arc::new(Recorder {
        fail,
        ..Recorder::default()
    });
    let buffer = ClaimedDevice {
        bytes: vec![0; n],
        device: DLDevice {
            device_type: DLDeviceType(device.0),
            device_id: device.1,
        },
        order: order.clone(),
    };
    (buffer, order)
}

/// A `dlpack_rs.Tensor` of `n` bytes on `device` (claimed) made by `from_export`, and what its
/// stream order is asked.
#[pyfunction]
#[pyo3(signature = (n, device, fail=false))]
fn ordered_device_tensor(
    n: usize,
    device: (i32, i32),
    fail: bool,
) -> PyResult<(DLPackTensor, OrderCalls)> {
    let (buffer, order) = claimed(n, device, fail);
    Ok((
        DLPackTensor::from_export(Export::new(buffer))?,
        OrderCalls(order),
    ))
}

/// As [`ordered_device_tensor`], with the order set by `DLPackTensor::with_stream_order` on a
/// tensor made from a managed tensor (the route for device memory exported by other means).
#[pyfunction]
fn ordered_device_tensor_with(
    n: usize,
    device: (i32, i32),
) -> PyResult<(DLPackTensor, OrderCalls)> {
    let (buffer, order) = claimed(n, device, false);
    // The buffer's own order is not carried by a plain managed tensor: set it explicitly.
    let tensor = DLPackTensor::new(Export::new(buffer).versioned()?);
    Ok((tensor.with_stream_order(order.clone()), OrderCalls(order)))
}

/// A derived frozen class over a claimed device buffer: the derive forwards the data field's
/// stream order.
#[pyclass(frozen)]
#[derive(dlpack_rs::IntoDLPack)]
#[dlpack(pyclass)]
struct DerivedDeviceTensor {
    #[dlpack(data)]
    data: ClaimedDevice,
}

/// A [`DerivedDeviceTensor`] of `n` bytes on `device`, and what its stream order is asked.
#[pyfunction]
fn derived_device_tensor(n: usize, device: (i32, i32)) -> (DerivedDeviceTensor, OrderCalls) {
    let (data, order) = claimed(n, device, false);
    (DerivedDeviceTensor { data }, OrderCalls(order))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OrderCalls>()?;
    m.add_class::<DerivedDeviceTensor>()?;
    m.add_function(wrap_pyfunction!(ordered_device_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(ordered_device_tensor_with, m)?)?;
    m.add_function(wrap_pyfunction!(derived_device_tensor, m)?)?;
    Ok(())
}
