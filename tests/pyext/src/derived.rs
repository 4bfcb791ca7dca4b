//! Frozen `#[pyclass]`es made DLPack producers by `#[derive(IntoDLPack)]`, for the Python
//! interop suite (needs dlpack-rs features `derive` and `half`). Every value holds a
//! `DropCounter`, so the suite can check that each one is dropped exactly once, after the last
//! consumer's deleter.
//!
//! The forms covered: `Vec`, `Box<[T]>` and a user `Buffer` (`Aligned`, 64-byte aligned so
//! that JAX imports it zero-copy) as data; shape as `[usize; N]`, `Vec<i64>`, `Vec<usize>` or
//! none; strides; a dtype field; a byte offset field; a device field and the `device = ...`
//! attribute; `read_only`; a tuple struct; a generic struct (trait impl only, exported through
//! `DLPackTensor` or a capsule); and `#[dlpack_rs::pymethods]` on a class's own block.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_rs::ffi::{DLDataType, DLDevice};
use dlpack_rs::pyo3_glue::DLPackTensor;
use dlpack_rs::safe::{cpu_device, dtype_f32, Buffer, Element};
use dlpack_rs::IntoDLPack;
use half::{bf16, f16};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::{parse_dtype, Chunk};

static DERIVED_CREATED: AtomicUsize = AtomicUsize::new(0);
static DERIVED_DROPPED: AtomicUsize = AtomicUsize::new(0);

/// Counts creations and drops of the derived values (one per value).
pub(crate) struct DropCounter;

impl DropCounter {
    pub(crate) fn new() -> Self {
        DERIVED_CREATED.fetch_add(1, Ordering::SeqCst);
        DropCounter
    }
}

impl Drop for DropCounter {
    fn drop(&mut self) {
        DERIVED_DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

/// A user container: `len` elements of `T` in 64-byte aligned heap memory (XLA/JAX import CPU
/// memory zero-copy only at this alignment; `Vec<T>` gives no such guarantee).
struct Aligned<T> {
    /// The first element, taken from `chunks.as_mut_ptr()` once; `chunks` is not touched again.
    ptr: NonNull<T>,
    len: usize,
    /// Owns the memory; its heap block does not move when the `Aligned` is moved.
    _chunks: Vec<Chunk>,
    _elem: PhantomData<T>,
}

// SAFETY: `Aligned<T>` owns its memory uniquely, like a `Vec<T>`; the raw pointer is only an
// address into that memory, so sending or sharing it is as safe as sending or sharing the `T`s.
unsafe impl<T: Send> Send for Aligned<T> {}
// SAFETY: as above; `&Aligned<T>` only reads the elements.
unsafe impl<T: Sync> Sync for Aligned<T> {}

impl<T: Element> Aligned<T> {
    /// `len` elements, element `i` being `f(i)`.
    fn from_fn(len: usize, mut f: impl FnMut(usize) -> T) -> Self {
        assert!(std::mem::align_of::<T>() <= std::mem::align_of::<Chunk>());
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("Aligned: size overflows");
        let mut chunks = vec![Chunk([0; 64]); bytes.div_ceil(64)];
        let ptr = NonNull::new(chunks.as_mut_ptr().cast::<T>()).expect("Vec pointers are non-null");
        for i in 0..len {
            // SAFETY: `chunks` holds at least `len * size_of::<T>()` bytes, aligned to 64 (>= the
            // alignment of `T`), so element `i < len` is in bounds and aligned.
            unsafe { ptr.as_ptr().add(i).write(f(i)) };
        }
        Aligned {
            ptr,
            len,
            _chunks: chunks,
            _elem: PhantomData,
        }
    }
}

impl Aligned<f64> {
    /// A copy of the elements as they are now (consumers may have written to them).
    fn to_vec(&self) -> Vec<f64> {
        // A consumer writing from a thread without the GIL would race with any Rust read of a
        // writable export (see the derive's docs on `read_only`); the suite writes only from
        // Python code holding the GIL, which is held here too.
        // SAFETY: `ptr` points at `len` initialised `f64`s owned by `self`, every bit pattern a
        // consumer can write is a valid `f64`, and no write overlaps this short-lived slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }.to_vec()
    }
}

// SAFETY: `ptr` points at `len` initialised elements in the heap block of `_chunks`, which
// lives as long as the value and stays in place when the value is moved; Rust code never holds
// a reference to the elements across a consumer's write (`to_vec` copies them out at once).
unsafe impl<T: Element> Buffer for Aligned<T> {
    type Elem = T;
    // The pointer is the raw one taken from `as_mut_ptr` at construction, not a reference.
    const SHARED_PTR_WRITABLE: bool = true;
    fn data_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
    fn num_elements(&self) -> usize {
        self.len
    }
}

/// An 8-bit image of `height x width x channels`, with values `i % 256` (data `Vec<u8>`, shape
/// `[usize; 3]`, dtype from the element type).
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct DerivedImage {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: [usize; 3],
    _count: DropCounter,
}

/// `DerivedImage(height, width, channels)`, built by a function: the class has no
/// `#[pymethods]` of its own, the derive's are its only ones.
#[pyfunction]
fn derived_image(height: usize, width: usize, channels: usize) -> PyResult<DerivedImage> {
    let n = height
        .checked_mul(width)
        .and_then(|n| n.checked_mul(channels))
        .ok_or_else(|| PyValueError::new_err("image too large"))?;
    Ok(DerivedImage {
        pixels: (0..n).map(|i| (i % 256) as u8).collect(),
        shape: [height, width, channels],
        _count: DropCounter::new(),
    })
}

/// A 1-D `f32` vector (tuple struct, data `Vec<f32>`, no shape field).
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct DerivedVector(#[dlpack(data)] Vec<f32>, DropCounter);

/// A `DerivedVector` of `values`.
#[pyfunction]
fn derived_vector(values: Vec<f32>) -> DerivedVector {
    DerivedVector(values, DropCounter::new())
}

/// The transpose of a row-major `rows x cols` `f32` matrix holding `0, 1, 2, ...`: shape
/// `(cols, rows)`, strides `(1, cols)`, with the dtype given by a field.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct DerivedTransposed {
    #[dlpack(data)]
    data: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
    #[dlpack(dtype)]
    dtype: DLDataType,
    _count: DropCounter,
}

/// A `DerivedTransposed` of a `rows x cols` matrix.
#[pyfunction]
fn derived_transposed(rows: u32, cols: u32) -> DerivedTransposed {
    let (rows, cols) = (i64::from(rows), i64::from(cols));
    DerivedTransposed {
        data: (0..rows * cols).map(|i| i as f32).collect(),
        shape: vec![cols, rows],
        strides: vec![1, cols],
        dtype: dtype_f32(),
        _count: DropCounter::new(),
    }
}

/// A read-only `i32` vector `0..n` (exported with `READ_ONLY`; legacy export is refused).
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
#[dlpack(read_only)]
struct DerivedReadOnly {
    #[dlpack(data)]
    data: Vec<i32>,
    _count: DropCounter,
}

/// A `DerivedReadOnly` holding `0..n`.
#[pyfunction]
fn derived_read_only(n: u32) -> PyResult<DerivedReadOnly> {
    let n = i32::try_from(n).map_err(|_| PyValueError::new_err("n too large"))?;
    Ok(DerivedReadOnly {
        data: (0..n).collect(),
        _count: DropCounter::new(),
    })
}

/// Any dtype, from its bytes: a user buffer (`Aligned<u8>`, 64-byte aligned) reinterpreted by
/// a dtype field, with a fixed device given by the struct attribute.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
#[dlpack(device = "cpu:0")]
struct DerivedTyped {
    #[dlpack(data)]
    bytes: Aligned<u8>,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    _count: DropCounter,
}

/// A `DerivedTyped` of `shape` and `dtype` (a numpy-style name) holding `data` (C order).
#[pyfunction]
fn derived_typed(data: &[u8], dtype: &str, shape: Vec<i64>) -> PyResult<DerivedTyped> {
    let dtype = parse_dtype(dtype)?;
    let numel = shape
        .iter()
        .try_fold(1i64, |n, &d| if d < 0 { None } else { n.checked_mul(d) });
    let expected = numel.and_then(|n| n.checked_mul(i64::from(dtype.bits / 8)));
    if expected != i64::try_from(data.len()).ok() {
        return Err(PyValueError::new_err(format!(
            "{} bytes do not hold shape {shape:?} of {} bits",
            data.len(),
            dtype.bits
        )));
    }
    Ok(DerivedTyped {
        bytes: Aligned::from_fn(data.len(), |i| data[i]),
        dtype,
        shape,
        _count: DropCounter::new(),
    })
}

/// A window of `len` `f64`s starting at element `start` of a buffer holding `0, 1, 2, ...`:
/// a byte offset field, a device field, shape `Vec<usize>`.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct DerivedWindow {
    #[dlpack(data)]
    data: Vec<f64>,
    #[dlpack(shape)]
    shape: Vec<usize>,
    #[dlpack(byte_offset)]
    offset: usize,
    #[dlpack(device)]
    device: DLDevice,
    _count: DropCounter,
}

/// A `DerivedWindow` over a buffer of `total` elements.
#[pyfunction]
fn derived_window(total: usize, start: usize, len: usize) -> PyResult<DerivedWindow> {
    if start.checked_add(len).is_none_or(|end| end > total) {
        return Err(PyIndexError::new_err("window outside the buffer"));
    }
    Ok(DerivedWindow {
        data: (0..total).map(|i| i as f64).collect(),
        shape: vec![len],
        offset: start * std::mem::size_of::<f64>(),
        device: cpu_device(),
        _count: DropCounter::new(),
    })
}

/// A generic tensor: `IntoDLPack` only (pyo3 classes cannot be generic), exported through
/// `dlpack_rs.Tensor` or a capsule. Its dtype comes from `T`.
#[derive(IntoDLPack)]
struct Tensor<T: Element> {
    #[dlpack(data)]
    data: Aligned<T>,
    #[dlpack(shape)]
    shape: Vec<usize>,
    _count: DropCounter,
}

/// Element values that mirror `conftest.sample` of the Python suite.
trait Sample: Element + Copy {
    fn sample(i: usize) -> Self;
}

macro_rules! sample_ints {
    ($($t:ty => $mul:expr, $add:expr;)*) => {$(
        impl Sample for $t {
            fn sample(i: usize) -> Self {
                // Wrapping, like numpy's `astype` of the int64 values.
                (i as i64 * $mul + $add) as $t
            }
        }
    )*};
}
sample_ints! {
    u8 => 7, 3;
    i32 => 7, -11;
    i64 => 7, -11;
}

impl Sample for f32 {
    fn sample(i: usize) -> Self {
        (i as f64 * 0.25 - 1.5) as f32
    }
}

impl Sample for f64 {
    fn sample(i: usize) -> Self {
        i as f64 * 0.25 - 1.5
    }
}

impl Sample for bool {
    fn sample(i: usize) -> Self {
        i % 3 == 1
    }
}

impl Sample for f16 {
    fn sample(i: usize) -> Self {
        f16::from_f64(i as f64 * 0.25 - 1.5)
    }
}

impl Sample for bf16 {
    fn sample(i: usize) -> Self {
        // The upper half of the f32 bits, as the suite computes it.
        bf16::from_bits(((i as f32 * 0.5 - 3.0).to_bits() >> 16) as u16)
    }
}

impl<T: Sample> Tensor<T> {
    fn sample(shape: Vec<usize>) -> PyResult<Self> {
        let n = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| PyValueError::new_err("shape too large"))?;
        Ok(Tensor {
            data: Aligned::from_fn(n, T::sample),
            shape,
            _count: DropCounter::new(),
        })
    }
}

macro_rules! with_element {
    ($dtype:expr, |$t:ident| $body:expr) => {
        match $dtype {
            "uint8" => {
                type $t = u8;
                $body
            }
            "int32" => {
                type $t = i32;
                $body
            }
            "int64" => {
                type $t = i64;
                $body
            }
            "float16" => {
                type $t = f16;
                $body
            }
            "bfloat16" => {
                type $t = bf16;
                $body
            }
            "float32" => {
                type $t = f32;
                $body
            }
            "float64" => {
                type $t = f64;
                $body
            }
            "bool" => {
                type $t = bool;
                $body
            }
            other => Err(PyValueError::new_err(format!(
                "no generic tensor of dtype {other}"
            ))),
        }
    };
}

/// A `Tensor<T>` (T named by `dtype`) of `conftest.sample(dtype, shape)`, moved into a
/// `dlpack_rs.Tensor`: the generic struct dropped by the deleter of the last consumer.
#[pyfunction]
fn derived_generic(dtype: &str, shape: Vec<usize>) -> PyResult<DLPackTensor> {
    with_element!(dtype, |T| Ok(DLPackTensor::new(
        Tensor::<T>::sample(shape)?.into_managed_tensor_versioned()?
    )))
}

/// As `derived_generic`, as a raw capsule (`into_capsule_versioned` or `into_capsule`).
#[pyfunction]
#[pyo3(signature = (dtype, shape, *, versioned))]
fn derived_generic_capsule<'py>(
    py: Python<'py>,
    dtype: &str,
    shape: Vec<usize>,
    versioned: bool,
) -> PyResult<Bound<'py, PyCapsule>> {
    with_element!(dtype, |T| {
        let t = Tensor::<T>::sample(shape)?;
        if versioned {
            t.into_capsule_versioned(py)
        } else {
            t.into_capsule(py)
        }
    })
}

/// An `f64` signal with its own methods: `#[dlpack_rs::pymethods]` on its block adds the
/// protocol next to its constructor and getters.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
struct DerivedSignal {
    #[dlpack(data)]
    samples: Aligned<f64>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    _count: DropCounter,
}

impl DerivedSignal {
    fn build(values: Vec<f64>, shape: Option<Vec<i64>>) -> PyResult<Self> {
        let shape = shape.unwrap_or_else(|| vec![values.len() as i64]);
        let numel = shape
            .iter()
            .try_fold(1i64, |n, &d| if d < 0 { None } else { n.checked_mul(d) });
        if numel != i64::try_from(values.len()).ok() {
            return Err(PyValueError::new_err(format!(
                "{} values do not fill shape {shape:?}",
                values.len()
            )));
        }
        Ok(DerivedSignal {
            samples: Aligned::from_fn(values.len(), |i| values[i]),
            shape,
            _count: DropCounter::new(),
        })
    }
}

#[dlpack_rs::pymethods]
impl DerivedSignal {
    #[new]
    #[pyo3(signature = (values, shape=None))]
    fn py_new(values: Vec<f64>, shape: Option<Vec<i64>>) -> PyResult<Self> {
        Self::build(values, shape)
    }

    /// The samples as they are now, in memory order (writes by consumers show here).
    #[getter]
    fn values(&self) -> Vec<f64> {
        self.samples.to_vec()
    }

    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    /// Address of the first sample.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.samples.data_ptr() as usize
    }

    /// A new signal with sample `index` set to `value`; `self` (and any export of it) is
    /// unchanged: a frozen class cannot change its buffer.
    fn with_value(&self, index: usize, value: f64) -> PyResult<Self> {
        let mut values = self.samples.to_vec();
        *values
            .get_mut(index)
            .ok_or_else(|| PyIndexError::new_err("index out of range"))? = value;
        Self::build(values, Some(self.shape.clone()))
    }
}

/// Bytes of a `DerivedImage` as Rust sees them now (writes by consumers show here).
#[pyfunction]
fn derived_image_pixels(img: &Bound<'_, DerivedImage>) -> Vec<u8> {
    img.get().pixels.clone()
}

/// (created, dropped) counts of the derived values.
#[pyfunction]
fn derived_counts() -> (usize, usize) {
    (
        DERIVED_CREATED.load(Ordering::SeqCst),
        DERIVED_DROPPED.load(Ordering::SeqCst),
    )
}

/// How many derived values have been dropped so far.
#[pyfunction]
fn derived_dropped() -> usize {
    DERIVED_DROPPED.load(Ordering::SeqCst)
}

/// Adds the derived classes and their functions to the module.
pub fn register_derived(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DerivedImage>()?;
    m.add_class::<DerivedVector>()?;
    m.add_class::<DerivedTransposed>()?;
    m.add_class::<DerivedReadOnly>()?;
    m.add_class::<DerivedTyped>()?;
    m.add_class::<DerivedWindow>()?;
    m.add_class::<DerivedSignal>()?;
    m.add_function(wrap_pyfunction!(derived_image, m)?)?;
    m.add_function(wrap_pyfunction!(derived_vector, m)?)?;
    m.add_function(wrap_pyfunction!(derived_transposed, m)?)?;
    m.add_function(wrap_pyfunction!(derived_read_only, m)?)?;
    m.add_function(wrap_pyfunction!(derived_typed, m)?)?;
    m.add_function(wrap_pyfunction!(derived_window, m)?)?;
    m.add_function(wrap_pyfunction!(derived_generic, m)?)?;
    m.add_function(wrap_pyfunction!(derived_generic_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(derived_image_pixels, m)?)?;
    m.add_function(wrap_pyfunction!(derived_counts, m)?)?;
    m.add_function(wrap_pyfunction!(derived_dropped, m)?)?;
    Ok(())
}
