//! `#[derive(IntoDLPack)]` for dlpack-rs: use it through `dlpack_rs::IntoDLPack` (feature
//! `derive`), which brings both the trait and this derive.
#![deny(missing_docs)]

mod ast;
mod attr;
mod expand;
mod pymethods;
mod valid;

use proc_macro::TokenStream;

/// Derives `dlpack_rs::IntoDLPack` for a struct that owns a buffer, and for a `#[pyclass]` the
/// Python protocol methods `__dlpack__` and `__dlpack_device__`.
///
/// Use it as `dlpack_rs::IntoDLPack` (feature `derive`), which names both the trait and this
/// derive:
///
/// ```
/// use dlpack_rs::IntoDLPack;
///
/// #[derive(IntoDLPack)]
/// # #[dlpack(no_pymethods)] // doctests may be built with feature `pyo3`: see below
/// struct Image {
///     #[dlpack(data)]
///     pixels: Vec<u8>,
///     #[dlpack(shape)]
///     shape: [usize; 3],
/// }
///
/// let img = Image { pixels: vec![0; 2 * 3 * 4], shape: [2, 3, 4] };
/// let tensor = img.into_managed_tensor_versioned()?;
/// assert_eq!(tensor.shape(), &[2, 3, 4]);
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
///
/// # Field attributes
///
/// | attribute | field type | default without it |
/// |---|---|---|
/// | `#[dlpack(data)]` (exactly one) | `Vec<T>`, `Box<[T]>`, `Arc<[T]>` (read-only), `&'static [T]` (read-only), or any `dlpack_rs::safe::Buffer` (user containers) | required |
/// | `#[dlpack(shape)]` | `Vec<D>`, `Box<[D]>`, `Arc<[D]>`, `[D; N]`, `&[D]` with `D` one of `i64`, `i32`, `isize`, `u64`, `u32`, `usize` | one dimension over the whole buffer |
/// | `#[dlpack(strides)]` (in elements; needs `shape`) | as `shape`, or an `Option` of it (`None`: compact row-major) | compact row-major |
/// | `#[dlpack(dtype)]` | `dlpack_rs::ffi::DLDataType` | `<B::Elem as Element>::DTYPE` of the buffer |
/// | `#[dlpack(device)]` | `dlpack_rs::ffi::DLDevice`; must be the data buffer's own device (`Buffer::device`: the CPU for the standard buffers), checked per export | the struct's `device`, else the buffer's |
/// | `#[dlpack(byte_offset)]` | `u64`, `usize`, `u32`, `u16`, `u8` | 0 |
///
/// Tuple structs take the same attributes on their fields: `struct Flat(#[dlpack(data)] Vec<f32>);`.
/// Other fields are ignored.
///
/// # Struct attributes
///
/// - `#[dlpack(read_only)]`: export with the `READ_ONLY` flag (buffers that are not writable,
///   such as `Arc<[T]>`, are read-only anyway). A read-only tensor cannot be exported as a legacy
///   (unversioned) capsule.
/// - `#[dlpack(device = "cuda:0")]`: a fixed device, written `"<type>"` or `"<type>:<index>"`
///   with type one of `cpu`, `cuda`, `cuda_host`, `opencl`, `vulkan`, `metal`, `vpi`, `rocm`,
///   `rocm_host`, `ext_dev`, `cuda_managed`, `oneapi`, `webgpu`, `hexagon`, `maia`, `trn`,
///   `tpu`, `tpu_host`; or any expression of type `DLDevice`, such as a constant:
///   `#[dlpack(device = MY_DEVICE)]`. Conflicts with a `#[dlpack(device)]` field. It must be
///   the device the buffer says its memory is on (`Buffer::device`): a CPU buffer described as
///   device memory would make a consumer read host memory as device memory, so a mismatch
///   panics at export, like an out-of-bounds shape.
/// - `#[dlpack(no_pymethods)]`: do not generate the `#[pymethods]` block (see below).
///
/// # What it generates
///
/// Nothing that cannot be written by hand with the public API. For the `Image` above:
///
/// ```
/// # use dlpack_rs::IntoDLPack;
/// # use dlpack_rs::safe::{cpu_device, Buffer, Element, TensorInfo};
/// # struct Image { pixels: Vec<u8>, shape: [usize; 3] }
/// // SAFETY: the derive proves it: the data field is a `Buffer` (which vouches for its memory
/// // and device), and shape, strides, byte offset and device are checked against it.
/// unsafe impl IntoDLPack for Image {
///     fn tensor_info(&self) -> TensorInfo {
///         TensorInfo {
///             data: self.pixels.data_ptr().cast(),
///             device: cpu_device(),
///             dtype: <u8 as Element>::DTYPE,
///             shape: self.shape.iter().map(|&d| d as i64).collect(),
///             strides: None,
///             byte_offset: 0,
///         }
///         // (the derive also checks that shape, strides and byte offset stay inside the
///         // buffer and that the device is the buffer's, and panics if not: see "Panics")
///     }
///     fn is_read_only(&self) -> bool {
///         !self.pixels.is_writable()
///     }
/// }
/// ```
///
/// and, with feature `pyo3`, for a non-generic struct without `no_pymethods`:
///
/// ```ignore
/// #[pymethods]
/// impl Image {
///     #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
///     fn __dlpack__<'py>(
///         slf: &Bound<'py, Self>,
///         stream: Option<Bound<'py, PyAny>>,
///         max_version: Option<Bound<'py, PyAny>>,
///         dl_device: Option<Bound<'py, PyAny>>,
///         copy: Option<Bound<'py, PyAny>>,
///     ) -> PyResult<Bound<'py, PyCapsule>> {
///         dlpack_rs::pyo3_glue::export_dlpack(slf, stream, max_version, dl_device, copy)
///     }
///     fn __dlpack_device__(&self) -> (i32, i32) {
///         dlpack_rs::pyo3_glue::export_dlpack_device(self)
///     }
/// }
/// ```
///
/// # Python classes: `#[pyclass(frozen)]` and memory safety
///
/// ```ignore
/// #[pyclass(frozen)]
/// #[derive(IntoDLPack)]
/// struct Image {
///     #[dlpack(data)]  pixels: Vec<u8>,
///     #[dlpack(shape)] shape: Vec<i64>,
/// }
/// // Python: np.from_dlpack(img), torch.from_dlpack(img), jax.numpy.from_dlpack(img)
/// ```
///
/// `__dlpack__` exports a pointer into the buffer and keeps the Python object alive for as
/// long as the consumer holds the tensor. The class must be `#[pyclass(frozen)]`: a frozen
/// class has no `&mut self` method, so no Rust code reachable from Python can push to,
/// reallocate or free the buffer while a consumer reads it. A class that is not frozen is a
/// compile error ("needs a `#[pyclass(frozen)]` class"). Values that need to change after
/// construction can live in interior-mutable fields (`Mutex`, atomics) *other than* the
/// buffer; the exported shape, dtype and device are read once per export.
///
/// Unless the export is read-only, consumers write to the elements: that is the point of
/// in-place processing, and what `jax` (which only takes legacy, writable exports) needs. A
/// frozen class can still *read* its buffer through `&self`, and a read that overlaps a
/// consumer's write from another thread (torch runs kernels without the GIL) is a data race.
/// So, for a writable export, do not read the buffer from Rust while consumers may be writing
/// it (for example, copy it out under the GIL before handing work to other threads), or mark
/// the struct `#[dlpack(read_only)]`. Element types with invalid bit patterns (`bool`) are
/// always exported read-only, since a consumer could write a byte that safe Rust must never
/// read as a `bool`.
///
/// # Keeping one's own `#[pymethods]`
///
/// pyo3 allows one `#[pymethods]` block per class (unless its `multiple-pymethods` feature is
/// on). With a block of your own, add `#[dlpack(no_pymethods)]` and delegate in one line each,
/// as in the hand-written block above.
///
/// Generic structs (`struct Tensor<T: Element>`) get the `IntoDLPack` impl only: pyo3 classes
/// cannot be generic, so no `#[pymethods]` are generated for them.
///
/// The `#[pymethods]` block is generated when `dlpack_rs` is built with feature `pyo3`. Cargo
/// unifies features across a build, so a non-generic plain Rust type (not a `#[pyclass]`) that
/// may be built alongside another crate enabling `pyo3` should say `#[dlpack(no_pymethods)]`.
///
/// # Panics
///
/// `tensor_info` panics if the shape, strides and byte offset address bytes outside the data
/// field (as indexing out of bounds does): exporting them would let a consumer read or write
/// memory the struct does not own. Metadata that is invalid in itself (a negative extent, an
/// extent that does not fit `i64`) is instead refused by the export with an error.
///
/// # Compile errors
///
/// Every mistake is reported at the attribute or field type that causes it: a missing or second
/// data field, an unknown key (with a "did you mean" suggestion for misspellings), a field key
/// on the struct or a struct key on a field, a duplicate key, a key given a value, an enum or a
/// union, a field type that does not fit its role (a scalar buffer, an inline array, a shape of
/// floats, a dtype that is not `DLDataType`, a signed byte offset, ...), strides without a
/// shape, and a device given twice.
#[proc_macro_derive(IntoDLPack, attributes(dlpack))]
pub fn derive_into_dlpack(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::derive(&input).into()
}

/// Use in place of pyo3's `#[pymethods]` on the `impl` block of a class that derives
/// `IntoDLPack`: the block keeps all its own items (constructor, getters, anything) and gets the
/// DLPack protocol added: `__dlpack__(*, stream, max_version, dl_device, copy)`,
/// `__dlpack_device__` and the class attribute `__dlpack_c_exchange_api__`. No pyo3 feature
/// (`multiple-pymethods`) is needed. Needs dlpack-rs's features `derive` and `pyo3`.
///
/// ```
/// use dlpack_rs::IntoDLPack;
/// use pyo3::prelude::*;
///
/// #[pyclass(frozen)]
/// #[derive(IntoDLPack)]
/// struct Image {
///     #[dlpack(data)]
///     pixels: Vec<u8>,
///     #[dlpack(shape)]
///     shape: [usize; 3],
/// }
///
/// #[dlpack_rs::pymethods]
/// impl Image {
///     #[new]
///     fn new(height: usize, width: usize) -> Self {
///         Image { pixels: vec![0; height * width * 3], shape: [height, width, 3] }
///     }
///
///     #[getter]
///     fn height(&self) -> usize {
///         self.shape[0]
///     }
/// }
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let class = py.get_type::<Image>();
///     let image = class.call1((2, 4))?;
///     assert_eq!(image.getattr("height")?.extract::<usize>()?, 2);
///     assert_eq!(image.call_method0("__dlpack_device__")?.extract::<(i32, i32)>()?, (1, 0));
///     let tensor = dlpack_rs::pyo3_glue::PyTensor::from_pyany(py, &image)?;
///     assert_eq!(tensor.shape(), &[2, 4, 3]);
///     Ok(())
/// })
/// .unwrap();
/// ```
///
/// A class with no `#[pymethods]` block of its own asks for the same methods with
/// `#[dlpack(pyclass)]` on the struct; giving both is an error
/// (`Use_either_dlpack_pyclass_or_dlpack_rs_pymethods_not_both`), as is a block that defines
/// `__dlpack__` itself.
#[proc_macro_attribute]
pub fn pymethods(args: TokenStream, item: TokenStream) -> TokenStream {
    pymethods::expand(args.into(), item.into()).into()
}
