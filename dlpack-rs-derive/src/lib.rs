//! `#[derive(IntoDLPack)]` for dlpack-rs: use it through `dlpack_rs::IntoDLPack` (feature
//! `derive`), which brings both the trait and this derive.
#![deny(missing_docs)]

mod ast;
mod attr;
mod expand;
mod pymethods;
mod valid;

use proc_macro::TokenStream;

/// Derives `dlpack_rs::IntoDLPack` for a struct that owns a buffer, and, when asked, the Python
/// protocol methods of a `#[pyclass]`.
///
/// Use it as `dlpack_rs::IntoDLPack` (feature `derive`), which names both the trait and this
/// derive:
///
/// ```
/// use dlpack_rs::IntoDLPack;
///
/// #[derive(IntoDLPack)]
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
/// A plain struct like this one compiles the same whether or not any crate in the build turns
/// on dlpack-rs's feature `pyo3`: a core crate can derive on its tensor type and a separate
/// binding crate add the Python side.
///
/// # Field attributes
///
/// | attribute | field type | default without it |
/// |---|---|---|
/// | `#[dlpack(data)]` (exactly one) | `Vec<T>`, `Box<[T]>`, `dlpack_rs::safe::AlignedBuffer<T>` (64-byte aligned: zero-copy to jax), `Arc<[T]>` / `Arc<B>` (read-only), `&'static [T]` (read-only), ndarray `Array` / `ArcArray`, or any `dlpack_rs::safe::Buffer` (user containers) | required |
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
/// - `#[dlpack(pyclass)]`: on a `#[pyclass]` without a `#[pymethods]` block of its own, adds
///   one with the Python protocol (see "Python classes"). Needs feature `pyo3`.
/// - `#[dlpack(no_pymethods)]`: on a `#[pyclass]` that writes `__dlpack__` itself (delegating to
///   `dlpack_rs::pyo3_glue::export_dlpack`): the derive adds nothing and does not ask for the
///   methods. (A `#[pyclass]` with neither this, `pyclass`, nor a `#[dlpack_rs::pymethods]`
///   block is a compile error: Python would see no `__dlpack__`.)
/// - `#[dlpack(read_only)]`: export with the `READ_ONLY` flag (buffers that are not writable,
///   such as `Arc<[T]>`, are read-only anyway). A read-only tensor cannot be exported as a legacy
///   (unversioned) capsule.
/// - `#[dlpack(legacy_read_only = "share")]`: a legacy (unversioned) `__dlpack__` request of
///   read-only data (what jax makes) shares the memory instead of getting a copy, **trusting the
///   consumer not to write it** (a legacy capsule cannot say "read-only"); the export still holds
///   a shared borrow of the bytes. `"copy"` is the default, written out.
/// - `#[dlpack(device = "cuda:0")]`: a fixed device, written `"<type>"` or `"<type>:<index>"`
///   with type one of `cpu`, `cuda`, `cuda_host`, `opencl`, `vulkan`, `metal`, `vpi`, `rocm`,
///   `rocm_host`, `ext_dev`, `cuda_managed`, `oneapi`, `webgpu`, `hexagon`, `maia`, `trn`,
///   `tpu`, `tpu_host`, `ascend`; or any expression of type `DLDevice`, such as a constant:
///   `#[dlpack(device = MY_DEVICE)]`. Conflicts with a `#[dlpack(device)]` field. It must be
///   the device the buffer says its memory is on (`Buffer::device`): a CPU buffer described as
///   device memory would make a consumer read host memory as device memory, so a mismatch
///   panics at export, like an out-of-bounds shape.
///
/// # What it generates
///
/// What a hand-written implementation does, plus the checks below, made through the crate's
/// hidden derive support (its bounds checks, the frozen-class route of `#[pyclass]`): not an
/// interface to write by hand. For the `Image` above, in effect:
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
/// plus a hidden trait impl naming the data field (which a mutable class's export clones), and
/// with `#[dlpack(pyclass)]` a `#[pymethods]` block with `__dlpack__(*, stream=None,
/// max_version=None, dl_device=None, copy=None)`, `__dlpack_device__()` and the class attribute
/// `__dlpack_c_exchange_api__` (the DLPack 1.3 C exchange table).
///
/// # Python classes
///
/// Three shapes, each a few words on top of pyo3's own:
///
/// **1. Frozen, with its own methods.** Write [`macro@pymethods`] (`#[dlpack_rs::pymethods]`) in
/// place of `#[pymethods]` on the class's block; the block keeps its constructor, getters and
/// anything else, and gets the protocol. (A class with no block of its own writes
/// `#[dlpack(pyclass)]` on the struct instead.) No pyo3 feature (`multiple-pymethods`) is needed.
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
///     shape: [usize; 2],
/// }
///
/// #[dlpack_rs::pymethods]
/// impl Image {
///     #[new]
///     fn new(height: usize, width: usize) -> Self {
///         Image { pixels: vec![7; height * width], shape: [height, width] }
///     }
/// }
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let image = py.get_type::<Image>().call1((2, 3))?; // Image(2, 3) from Python
///     let tensor = dlpack_rs::pyo3_glue::PyTensor::from_pyany(py, &image)?;
///     assert_eq!((tensor.shape(), tensor.is_read_only()), (&[2i64, 3][..], false));
///     // The export keeps the object alive: a frozen class cannot free its pixels meanwhile.
///     assert_eq!(tensor.as_slice::<u8>()?[5], 7);
///     Ok(())
/// })
/// .unwrap();
/// ```
///
/// A frozen class has no `&mut self` method, so nothing can reallocate or free the buffer while
/// a consumer reads it; the export keeps the Python object alive. Consumers may write to the
/// elements unless the export is read-only: that is the point of in-place processing, and what
/// `jax` (which only takes legacy, writable exports) needs. A frozen class can still *read* its
/// buffer through `&self`, and a read that overlaps a consumer's write from another thread
/// (torch runs kernels without the GIL) is a data race. So, for a writable export, do not read
/// the buffer from Rust while consumers may be writing it (copy it out under the GIL before
/// handing work to other threads), or mark the struct `#[dlpack(read_only)]`. Element types with
/// invalid bit patterns (`bool`) are always exported read-only.
///
/// **2. Mutable, with shared data.** A class that is not frozen must hold its data by shared
/// ownership (a `dlpack_rs::safe::SharedBuffer`: `Arc<[T]>`, `Arc<AlignedBuffer<T>>`,
/// `ndarray::ArcArray`). Each export holds its own reference to the data, not the object, so a
/// `&mut self` method may replace the data (or ndarray may copy on write) at any time and a
/// consumer keeps reading what it was given. Such exports are read-only (numpy marks its array
/// so; jax, which asks for legacy capsules only, which cannot say "read-only", gets a copy, as
/// README's export table says). A mutable class
/// owning a `Vec` is a compile error that names both fixes.
///
/// ```
/// use std::sync::Arc;
///
/// use dlpack_rs::IntoDLPack;
/// use pyo3::prelude::*;
///
/// #[pyclass]
/// #[derive(IntoDLPack)]
/// struct Frame {
///     #[dlpack(data)]
///     pixels: Arc<[f32]>,
/// }
///
/// #[dlpack_rs::pymethods]
/// impl Frame {
///     #[new]
///     fn new(len: usize) -> Self {
///         Frame { pixels: vec![1.0; len].into() }
///     }
///
///     fn fill(&mut self, value: f32) {
///         self.pixels = vec![value; self.pixels.len()].into();
///     }
/// }
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let frame = Bound::new(py, Frame::new(4))?;
///     let tensor = dlpack_rs::pyo3_glue::PyTensor::from_pyany(py, frame.as_any())?;
///     frame.call_method1("fill", (9.0,))?; // replaces the pixels ...
///     assert_eq!(&*tensor.as_slice::<f32>()?, &[1.0; 4]); // ... the export still has its own
///     assert!(tensor.is_read_only());
///     Ok(())
/// })
/// .unwrap();
/// ```
///
/// **3. A plain Rust struct** (no pyclass), as in the first example: only the trait impl, for
/// `into_capsule`, `DLPackTensor::new(value.into_managed_tensor_versioned()?)` or a Rust
/// consumer. Generic structs (`struct Tensor<T: Element>`) are always of this shape: pyo3
/// classes cannot be generic, and `#[dlpack(pyclass)]` on one is an error.
///
/// # Zero copy to jax
///
/// jax shares CPU memory only when it is 64-byte aligned and silently copies otherwise. A
/// `Vec<f32>` is only 4-byte aligned, so its exports are usually copied by jax; hold the data in
/// a `dlpack_rs::safe::AlignedBuffer<f32>` (64 bytes by default, any power of two) to be shared.
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
/// Every mistake is reported at the attribute or field type that causes it, once (after an
/// error the derive still emits a stub impl, so uses of the struct add no errors of their own):
/// a missing or second data field, an unknown key (with a "did you mean" suggestion for
/// misspellings), a field key on the struct or a struct key on a field, a duplicate key, a key
/// given a value, an enum or a union, a field type that does not fit its role (a scalar buffer,
/// an inline array, a shape of floats, a dtype that is not `DLDataType`, a signed byte offset,
/// ...), strides without a shape, a device given twice, `pyclass` on a generic struct, a mutable
/// class without shared data, both `#[dlpack(pyclass)]` and `#[dlpack_rs::pymethods]`, and a
/// `#[pyclass]` given neither (it would have no `__dlpack__` in Python).
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
