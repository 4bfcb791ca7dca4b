//! Typed `#[pyfunction]` arguments on any device (features `pyo3` and `ndarray`):
//! [`DeviceTensor`] (shared) and [`DeviceTensorMut`] (exclusive) check the element type, the
//! shape and the layout as [`TensorView`](super::TensorView) does, but accept memory on any
//! device (CUDA, ROCm, Metal, ...) and hand out only a raw pointer: no host slice or view.

use core::fmt;
use core::marker::PhantomData;

use pyo3::prelude::*;
use pyo3::Borrowed;

use alloc::borrow::Cow;

use super::extract::Source;
use super::framework::Framework;
use super::views::{check_meta, layout_error, Layout, Shape, Strided};
use crate::ffi::{DLDataType, DLDevice};
use crate::safe::borrow::BorrowToken;
use crate::safe::Element;

/// What both device argument types hold: the first element, its borrow, the tensor, and the
/// caller's framework.
struct Placed<T> {
    ptr: *mut T,
    // Dropped before the source (fields drop in order).
    _borrow: BorrowToken,
    source: Source,
    framework: Framework,
}

impl<T: Element> Placed<T> {
    /// Imports `obj` and checks it against `T`, `S` and `L`, then borrows every byte its
    /// elements address (exclusively or not).
    fn import<S: Shape, L: Layout>(obj: &Bound<'_, PyAny>, exclusive: bool) -> PyResult<Self> {
        let framework = Framework::of(obj);
        let source = Source::import(obj, exclusive)?;
        check_meta::<S, L>(&source, T::DTYPE)?;
        match source.raw_parts::<T>(exclusive) {
            Ok((ptr, borrow)) => Ok(Placed {
                ptr,
                _borrow: borrow,
                source,
                framework,
            }),
            Err(e) => Err(layout_error(&source, e)),
        }
    }
}

/// A read-only tensor argument of element type `T`, shape `S` and layout `L` (any strides by
/// default) on **any device**, from any DLPack producer: the element type, shape and layout
/// are checked, and refused with the same exceptions, as for [`TensorView`](super::TensorView)
/// (`TypeError: expected a tensor of float32, got float64 ...`), but the memory may be on a
/// GPU: the argument hands out its address ([`DeviceTensor::data_ptr`]), the device
/// ([`DeviceTensor::device`]) and the layout, never a host slice.
///
/// For host data prefer [`TensorView`](super::TensorView) / [`TensorRef`](super::TensorRef):
/// they give safe views. For a CUDA tensor as a cudarc view on a stream of your choice, use
/// `dlpack_rs::cuda::import` (feature `cudarc`).
///
/// # The pointer
///
/// Getting the pointer is safe; using it is `unsafe` code's business, under these rules:
///
/// - It is the address of the first element (`data + byte_offset`), non-NULL and aligned for
///   `T` unless the tensor is empty; element `i` is at `ptr + sum(i[k] * strides[k])` (strides in
///   elements, possibly negative). On devices whose `data` is an opaque handle rather than an
///   address (OpenCL, Vulkan) it means nothing as an address.
/// - The memory stays valid while the argument lives: dropping it hands the tensor back to its
///   producer, which may free it. Device work that uses the memory must be complete before the
///   argument drops (on CUDA: synchronise the stream that used it).
/// - Ordering: the import calls `__dlpack__()` with no `stream`, which on CUDA means the
///   legacy default stream: the producer has ordered its work before that stream, so work
///   queued on the legacy default stream (or on a stream that synchronises with it) sees the
///   data; work on a non-blocking stream must wait for an event recorded there first.
/// - The argument holds a shared borrow of every byte the elements address in the
///   [borrow registry](crate::safe#the-borrow-registry), so no writable Rust view of that memory exists while
///   it lives; nothing may write through this pointer.
///
/// ```
/// use dlpack_rs::pyo3_glue::DeviceTensor;
/// use pyo3::prelude::*;
///
/// /// Where a float32 tensor of any device lives, its shape, and its address.
/// #[pyfunction]
/// fn describe(x: DeviceTensor<f32>) -> ((i32, i32), Vec<i64>, usize) {
///     let device = x.device();
///     let where_ = (device.device_type.0, device.device_id);
///     // A kernel launch would take `x.data_ptr()` here (in `unsafe` code, on the legacy
///     // default stream), and synchronise before `x` drops.
///     (where_, x.shape().to_vec(), x.data_ptr() as usize)
/// }
/// # fn main() {}
/// ```
pub struct DeviceTensor<T, S: Shape = ndarray::IxDyn, L: Layout = Strided> {
    held: Placed<T>,
    _shape: PhantomData<(S, L)>,
}

/// A writable tensor argument of element type `T`, shape `S` and layout `L` on any device,
/// from any DLPack producer: [`DeviceTensor`]'s checks, and, as for
/// [`TensorViewMut`](super::TensorViewMut), the tensor must be writable (`BufferError` saying
/// why not: a legacy capsule, a producer's `READ_ONLY` flag), no two indices may reach one
/// element, and the borrow of its bytes is exclusive (so `f(x, x)` is refused).
///
/// [`DeviceTensorMut::data_ptr_mut`] may be written through, under [`DeviceTensor`]'s rules for
/// the pointer.
///
/// ```
/// use dlpack_rs::pyo3_glue::{CContig, DeviceTensorMut};
/// use dlpack_rs::ndarray::Ix1;
/// use pyo3::prelude::*;
///
/// /// The address a kernel would fill: a C-contiguous 1-d float32 tensor on any device.
/// #[pyfunction]
/// fn target(mut out: DeviceTensorMut<f32, Ix1, CContig>) -> usize {
///     out.data_ptr_mut() as usize
/// }
/// # fn main() {}
/// ```
pub struct DeviceTensorMut<T, S: Shape = ndarray::IxDyn, L: Layout = Strided> {
    held: Placed<T>,
    _shape: PhantomData<(S, L)>,
}

// SAFETY: a `DeviceTensor` is an owner plus a pointer that safe code cannot dereference, like
// `(PyTensor, *const T)` with the shared borrow a `TensorView` holds; `T: Sync` as for a view.
unsafe impl<T: Sync, S: Shape, L: Layout> Send for DeviceTensor<T, S, L> {}
// SAFETY: as above; `&DeviceTensor` gives only metadata and a `*const T`.
unsafe impl<T: Sync, S: Shape, L: Layout> Sync for DeviceTensor<T, S, L> {}
// SAFETY: a `DeviceTensorMut` is an owner plus an exclusively borrowed pointer, like
// `(PyTensor, *mut T)`; `T: Send` as for `TensorViewMut`.
unsafe impl<T: Send, S: Shape, L: Layout> Send for DeviceTensorMut<T, S, L> {}
// SAFETY: as above; `&DeviceTensorMut` gives only metadata and a `*const T`.
unsafe impl<T: Sync, S: Shape, L: Layout> Sync for DeviceTensorMut<T, S, L> {}

impl<'a, 'py, T: Element, S: Shape, L: Layout> FromPyObject<'a, 'py> for DeviceTensor<T, S, L> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        Placed::import::<S, L>(&obj, false).map(|held| DeviceTensor {
            held,
            _shape: PhantomData,
        })
    }
}

impl<'a, 'py, T: Element, S: Shape, L: Layout> FromPyObject<'a, 'py> for DeviceTensorMut<T, S, L> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        Placed::import::<S, L>(&obj, true).map(|held| DeviceTensorMut {
            held,
            _shape: PhantomData,
        })
    }
}

macro_rules! accessors {
    ($ty:ident) => {
        super::extract::source_metadata!(impl[T, S: Shape, L: Layout] $ty<T, S, L>,
            strides: "Strides in elements, as the producer gave them (compact row-major strides \
                      when it gave none).",
            device: "Where the memory lives: any device, the CPU included.");
        impl<T, S: Shape, L: Layout> $ty<T, S, L> {
            /// The address of the first element on [`device`](Self::device) (see
            /// [`DeviceTensor`]'s rules for the pointer): safe to get, `unsafe` to use.
            pub fn data_ptr(&self) -> *const T {
                self.held.ptr
            }

            /// The framework the argument came from, to hand results back in kind.
            pub fn framework(&self) -> &Framework {
                &self.held.framework
            }
        }

        impl<T, S: Shape, L: Layout> fmt::Debug for $ty<T, S, L> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("device", &self.device())
                    .field("shape", &self.shape())
                    .field("strides", &self.strides())
                    .field("data_ptr", &self.data_ptr())
                    .finish()
            }
        }
    };
}
accessors!(DeviceTensor);
accessors!(DeviceTensorMut);

impl<T, S: Shape, L: Layout> DeviceTensorMut<T, S, L> {
    /// The address of the first element, for writing (see [`DeviceTensor`]'s rules for the
    /// pointer; the borrow is exclusive and the tensor was checked writable).
    pub fn data_ptr_mut(&mut self) -> *mut T {
        self.held.ptr
    }
}
