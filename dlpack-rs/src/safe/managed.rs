//! The one owner of a managed tensor: [`Managed`] takes a producer's `DLManagedTensor` or
//! `DLManagedTensorVersioned`, validates it once, answers for its metadata, hands out
//! borrow-checked views of its data, and calls the producer's deleter exactly once.

use alloc::borrow::Cow;
use core::ffi::c_void;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use super::borrow::BorrowToken;
use super::guard::{ReadSlice, WriteSlice};
use super::layout::{check, compact_strides, is_c_contiguous};
use super::{Element, Error, TensorInfo};
use crate::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_ALL_KNOWN, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
};

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Legacy {}
    impl Sealed for super::Versioned {}
    impl Sealed for super::AnyKind {}
}

/// Which managed struct a [`Managed`] owns: [`Legacy`], [`Versioned`], or [`AnyKind`] (either,
/// known at run time). Sealed: these three are all there are.
pub trait Kind: sealed::Sealed + 'static {}

/// A legacy `DLManagedTensor` (no version, no flags): [`ManagedTensor`].
#[derive(Debug)]
pub enum Legacy {}
/// A `DLManagedTensorVersioned` (DLPack >= 1.0): [`ManagedTensorVersioned`].
#[derive(Debug)]
pub enum Versioned {}
/// Either struct, as a Python import may deliver ([`AnyManaged`]).
#[derive(Debug)]
pub enum AnyKind {}

impl Kind for Legacy {}
impl Kind for Versioned {}
impl Kind for AnyKind {}

/// An owned legacy [`DLManagedTensor`].
pub type ManagedTensor = Managed<Legacy>;
/// An owned [`DLManagedTensorVersioned`].
pub type ManagedTensorVersioned = Managed<Versioned>;
/// An owned managed tensor of either kind.
pub type AnyManaged = Managed<AnyKind>;

/// An owned managed tensor: its `Drop` calls the producer's deleter exactly once.
///
/// Every accessor reads metadata validated when the owner was made ([`ManagedTensor::from_raw`],
/// [`ManagedTensorVersioned::from_raw`], or one of this crate's exports). Data is reached only
/// through views that are *borrows*: [`Managed::as_slice`] (shared) and
/// [`Managed::as_mut_slice`] (exclusive) return guards registered in the process-wide
/// [borrow registry](super#the-borrow-registry), so two owners of one memory (two imports of one numpy
/// array, say) can never hand out a `&mut` that aliases another view.
///
/// `Send` and `Sync`: DLPack lets a consumer call the deleter from any thread, and shared access
/// reads metadata that the producer keeps constant until the deleter runs; data views
/// synchronise through the registry.
///
/// ```
/// use dlpack_rs::safe::Export;
///
/// let mut t = Export::new(vec![1.0f32, 2.0, 3.0]).versioned()?;
/// t.as_mut_slice::<f32>()?[0] = 10.0;
/// let a = t.as_slice::<f32>()?;
/// let b = t.as_slice::<f32>()?; // shared views coexist
/// assert_eq!(*a, [10.0, 2.0, 3.0]);
/// assert_eq!(a[1], b[1]);
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
#[repr(C)]
pub struct Managed<K: Kind> {
    /// The `DLManagedTensor` (when `!versioned`) or `DLManagedTensorVersioned`.
    ptr: NonNull<c_void>,
    versioned: bool,
    /// Read-only by the owner's decision (a legacy import, which cannot say), whatever the
    /// producer's flags say.
    read_only: bool,
    /// When set and true at drop time, the tensor is leaked instead of calling the deleter (the
    /// Python glue's "the interpreter is going away and this thread may not attach").
    leak_if: Option<fn() -> bool>,
    /// The same, set by this crate only (the Python glue's shutdown guard of an import): kept
    /// apart from `leak_if` so that no safe call (`leak_on_drop_if`, reachable through
    /// `PyTensor`'s `DerefMut`) can take it away.
    guard: Option<fn() -> bool>,
    /// A borrow checker outside this crate that every view must satisfy too (rust-numpy's, for
    /// an import of a numpy array), with the context it keys by; set by the Python glue.
    external: Option<External>,
    _kind: PhantomData<K>,
}

/// A second borrow checker an owner's views must satisfy (see `Managed::set_external`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct External {
    /// What the checker does.
    pub(crate) api: &'static ExternalApi,
    /// What it keys by (an owned reference the owner releases with `drop_ctx`).
    pub(crate) ctx: *mut c_void,
}

/// The functions of an external borrow checker. None may unwind; each may run on any thread.
#[derive(Debug)]
pub(crate) struct ExternalApi {
    /// Takes a shared (`false`) or exclusive (`true`) borrow of the context's memory, or refuses
    /// with the error to report.
    pub(crate) acquire: unsafe fn(*mut c_void, bool) -> Result<(), Error>,
    /// Releases one borrow `acquire` took with the same arguments.
    pub(crate) release: unsafe fn(*mut c_void, bool),
    /// Releases the context itself, once, when the owner lets go of it.
    pub(crate) drop_ctx: unsafe fn(*mut c_void),
}

// SAFETY: see the type's documentation: the deleter may run on any thread per the protocol,
// and nothing in the owner is tied to the thread that made it.
unsafe impl<K: Kind> Send for Managed<K> {}
// SAFETY: `&Managed` reads metadata the producer keeps constant; data views go through the
// thread-safe borrow registry, and exclusive ones need `&mut`.
unsafe impl<K: Kind> Sync for Managed<K> {}

/// Validates a `DLTensor` a producer handed over.
///
/// # Safety
///
/// `t.shape` and `t.strides`, when non-NULL and `t.ndim > 0`, must point at `t.ndim` readable
/// `i64`s (the DLPack contract).
pub(crate) unsafe fn validate(t: &DLTensor) -> Result<(), Error> {
    if t.ndim < 0 {
        return Err(Error::NegativeNdim(t.ndim));
    }
    if t.ndim as usize > super::MAX_NDIM {
        return Err(Error::TooManyDims(t.ndim));
    }
    if t.ndim > 0 && t.shape.is_null() {
        return Err(Error::NullShape);
    }
    // SAFETY: forwarded from this function's contract; ndim and NULL were checked above.
    let (shape, strides) = unsafe { (raw_shape(t), raw_strides(t)) };
    check(shape, strides, t.dtype, t.byte_offset, t.data.is_null()).map(|_| ())
}

/// # Safety
/// `t.ndim >= 0`, and `t.shape` points at `ndim` `i64`s when `ndim > 0`.
pub(crate) unsafe fn raw_shape(t: &DLTensor) -> &[i64] {
    if t.ndim <= 0 || t.shape.is_null() {
        &[]
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { core::slice::from_raw_parts(t.shape, t.ndim as usize) }
    }
}

/// # Safety
/// `t.ndim >= 0`, and `t.strides` is NULL or points at `ndim` `i64`s.
pub(crate) unsafe fn raw_strides(t: &DLTensor) -> Option<&[i64]> {
    if t.strides.is_null() {
        None
    } else if t.ndim <= 0 {
        Some(&[])
    } else {
        // SAFETY: forwarded from the caller.
        Some(unsafe { core::slice::from_raw_parts(t.strides, t.ndim as usize) })
    }
}

impl<K: Kind> Managed<K> {
    /// # Safety
    /// `ptr` is an owned, valid managed struct of the kind `versioned` says, whose metadata has
    /// been validated; nobody else calls its deleter.
    unsafe fn from_parts(ptr: NonNull<c_void>, versioned: bool) -> Self {
        Managed {
            ptr,
            versioned,
            read_only: false,
            leak_if: None,
            guard: None,
            external: None,
            _kind: PhantomData,
        }
    }

    /// The underlying `DLTensor` (validated at construction).
    pub fn raw_tensor(&self) -> &DLTensor {
        // SAFETY: `ptr` is a live managed struct of the kind `versioned` says until Drop.
        unsafe {
            if self.versioned {
                &self
                    .ptr
                    .cast::<DLManagedTensorVersioned>()
                    .as_ref()
                    .dl_tensor
            } else {
                &self.ptr.cast::<DLManagedTensor>().as_ref().dl_tensor
            }
        }
    }

    /// Whether the producer sent a versioned (DLPack >= 1.0) tensor.
    pub fn is_versioned(&self) -> bool {
        self.versioned
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.raw_tensor().ndim as usize
    }

    /// Extent of each dimension (empty for a 0-d tensor).
    pub fn shape(&self) -> &[i64] {
        // SAFETY: validated at construction (ndim >= 0, shape non-NULL when ndim > 0); the
        // producer keeps its metadata alive until the deleter runs.
        unsafe { raw_shape(self.raw_tensor()) }
    }

    /// Strides in elements; compact row-major strides are synthesised when the producer sent
    /// NULL (allowed before DLPack 1.2).
    pub fn strides(&self) -> Cow<'_, [i64]> {
        match self.raw_strides() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(compact_strides(self.shape())),
        }
    }

    /// The strides exactly as the producer sent them (`None` for NULL).
    pub fn raw_strides(&self) -> Option<&[i64]> {
        // SAFETY: as in `shape`.
        unsafe { raw_strides(self.raw_tensor()) }
    }

    /// Offset in bytes from the data pointer to the first element.
    pub fn byte_offset(&self) -> u64 {
        self.raw_tensor().byte_offset
    }

    /// Element type.
    pub fn dtype(&self) -> DLDataType {
        self.raw_tensor().dtype
    }

    /// Where the memory lives.
    pub fn device(&self) -> DLDevice {
        self.raw_tensor().device
    }

    /// The `DLPACK_FLAG_BITMASK_*` flags as this owner grants them: the producer's (0 for a
    /// legacy tensor), plus `READ_ONLY` when the owner was made read-only
    /// ([`Managed::into_read_only`]).
    pub fn flags(&self) -> u64 {
        let producer = if self.versioned {
            // SAFETY: a live versioned struct until Drop.
            unsafe { self.ptr.cast::<DLManagedTensorVersioned>().as_ref().flags }
        } else {
            0
        };
        if self.read_only {
            producer | DLPACK_FLAG_BITMASK_READ_ONLY
        } else {
            producer
        }
    }

    /// Whether writes are forbidden (by the producer, or by this owner).
    pub fn is_read_only(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    }

    /// Whether the producer copied the data for this export.
    pub fn is_copied(&self) -> bool {
        self.flags() & DLPACK_FLAG_BITMASK_IS_COPIED != 0
    }

    /// The same tensor, from now on refused to mutable views and re-exported `READ_ONLY`.
    pub fn into_read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Makes the owner leak the tensor instead of calling the deleter when `leak_if()` is true
    /// at drop time: for a runtime whose deleters must not run once it is going away (the
    /// Python glue uses it during interpreter shutdown). The setting travels with the owner
    /// through every conversion of its kind.
    ///
    /// A later call replaces the predicate set by an earlier one; a guard this crate set itself
    /// (the Python glue's, on every import) stays in force whatever is set here.
    pub fn leak_on_drop_if(&mut self, leak_if: fn() -> bool) {
        self.leak_if = Some(leak_if);
    }

    /// Makes every view of this owner also take a borrow in `external` (after the registry's,
    /// released with it), and hands its context to the owner, which releases it once.
    ///
    /// # Safety
    ///
    /// `external.ctx` stays valid for `external.api`'s functions until `drop_ctx` is called on
    /// it, and this owner is the only one to call `drop_ctx` on it.
    #[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
    pub(crate) unsafe fn set_external(&mut self, external: External) {
        if let Some(old) = self.external.replace(external) {
            // SAFETY: the previous context was this owner's alone (this function's contract).
            unsafe { (old.api.drop_ctx)(old.ctx) };
        }
    }

    /// The external checker this owner's views satisfy, if any (its context stays this owner's).
    #[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
    pub(crate) fn external(&self) -> Option<External> {
        self.external
    }

    /// Adds the external checker's borrow to a registry token just taken for a view.
    pub(super) fn with_external(
        &self,
        token: BorrowToken,
        exclusive: bool,
    ) -> Result<BorrowToken, Error> {
        let Some(external) = self.external else {
            return Ok(token);
        };
        // SAFETY: the context stays valid until this owner drops it (`set_external`), and every
        // view (and so every token) borrows this owner.
        unsafe { (external.api.acquire)(external.ctx, exclusive) }?;
        Ok(token.with_external(super::borrow::ExternalHold {
            release: external.api.release,
            ctx: external.ctx,
            exclusive,
        }))
    }

    /// Releases the external checker's context (when the owner gives up the tensor).
    fn drop_external(&mut self) {
        if let Some(external) = self.external.take() {
            // SAFETY: this owner's own context, released once (`set_external`).
            unsafe { (external.api.drop_ctx)(external.ctx) };
        }
    }

    /// Sets the crate's own leak guard (see `leak_on_drop_if`), which no public call removes.
    #[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
    pub(crate) fn set_leak_guard(&mut self, leak_if: fn() -> bool) {
        self.guard = Some(leak_if);
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Validated at construction: the product does not overflow unless a zero extent makes
        // the tensor empty (whatever the other extents multiply to).
        let shape = self.shape();
        if shape.contains(&0) {
            return 0;
        }
        shape.iter().map(|&d| d as usize).product()
    }

    /// Bytes the elements occupy when packed densely (`ceil(numel * bits * lanes / 8)`);
    /// validated at construction not to overflow.
    pub fn nbytes(&self) -> usize {
        let bits = super::dtype::element_bits(self.dtype()) as u128;
        ((self.numel() as u128 * bits).div_ceil(8)) as usize
    }

    /// Whether the layout is compact row-major (size-1 dimensions may have any stride).
    pub fn is_contiguous(&self) -> bool {
        match self.raw_strides() {
            None => true,
            Some(strides) => is_c_contiguous(self.shape(), strides),
        }
    }

    /// The address of the first element (`data + byte_offset`), or NULL for a NULL data pointer.
    pub fn data_ptr(&self) -> *mut c_void {
        let t = self.raw_tensor();
        if t.data.is_null() {
            return core::ptr::null_mut();
        }
        // Validated at construction: the offset fits in isize. wrapping_add keeps this safe
        // even for device pointers, which are never dereferenced here.
        t.data
            .cast::<u8>()
            .wrapping_add(t.byte_offset as usize)
            .cast()
    }

    /// The metadata as a [`TensorInfo`] (for copying the same memory): shape and strides are
    /// copied, strides stay `None` when the producer sent NULL.
    pub fn tensor_info(&self) -> TensorInfo {
        let t = self.raw_tensor();
        TensorInfo {
            data: t.data,
            device: t.device,
            dtype: t.dtype,
            shape: self.shape().to_vec(),
            strides: self.raw_strides().map(<[i64]>::to_vec),
            byte_offset: t.byte_offset,
        }
    }

    /// Checks that elements of `T` may be read here: `T`'s dtype, on host-accessible memory.
    #[allow(dead_code)] // used by the ndarray views
    pub(crate) fn check_element<T: Element>(&self) -> Result<(), Error> {
        dtype_is::<T>(self.dtype())?;
        host_viewable(self.device())
    }

    /// The first element of a non-empty tensor as a `*mut T`: non-NULL and aligned for `T`.
    #[allow(dead_code)] // used by the ndarray views and the CUDA import
    pub(crate) fn first_element<T: Element>(&self) -> Result<*mut T, Error> {
        first_of::<T>(self.data_ptr())
    }

    /// Registers a borrow of the bytes the tensor's elements address (from the lowest to the
    /// highest element the strides reach, on the elements' progression: see the module docs).
    /// Nothing is registered for an empty tensor.
    #[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
    pub(crate) fn borrow_addressed(&self, exclusive: bool) -> Result<BorrowToken, Error> {
        let token = addressed_token(
            self.data_ptr(),
            self.shape(),
            &self.strides(),
            self.dtype(),
            exclusive,
        )?;
        self.with_external(token, exclusive)
    }

    /// Checks that a slice of `T` over this tensor is sound and borrows it, returning its first
    /// element, its length and the borrow.
    pub(crate) fn slice_parts<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, usize, BorrowToken), Error> {
        let t = self.raw_tensor();
        // SAFETY: the metadata was validated at construction and the memory lives until the
        // deleter runs, which cannot happen while `self` is borrowed.
        unsafe {
            contiguous_slice_parts::<T>(
                self.data_ptr(),
                self.shape(),
                self.raw_strides(),
                t.dtype,
                t.device,
                exclusive,
                |token| self.with_external(token, exclusive),
            )
        }
    }

    /// The elements as a shared slice (a guard that derefs to `[T]`), when the tensor is
    /// host-accessible, C-contiguous, of `T`'s dtype, aligned for `T` and (for `bool`) holds
    /// only 0 and 1. Refused with [`Error::AlreadyBorrowed`] while a mutable view of any of
    /// these bytes exists, through this owner or any other.
    pub fn as_slice<T: Element>(&self) -> Result<ReadSlice<'_, T>, Error> {
        let (ptr, len, token) = self.slice_parts::<T>(false)?;
        // SAFETY: checked and borrowed (shared) by `slice_parts`; the guard borrows `self`, so
        // the memory outlives it.
        Ok(unsafe { ReadSlice::new(ptr, len, token) })
    }

    /// The elements as a mutable slice (a guard that derefs to `[T]`): as [`Managed::as_slice`],
    /// and the tensor must not be read-only. Refused with [`Error::AlreadyBorrowed`] while any
    /// other view of these bytes exists, through this owner or any other.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<WriteSlice<'_, T>, Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let (ptr, len, token) = self.slice_parts::<T>(true)?;
        // SAFETY: checked and borrowed exclusively by `slice_parts`; the producer allows writes
        // (no READ_ONLY flag); the guard borrows `self` mutably, so the memory outlives it and
        // this owner hands out no other view meanwhile.
        Ok(unsafe { WriteSlice::new(ptr, len, token) })
    }

    /// A compact, row-major, 64-byte aligned host copy of the elements, flagged `IS_COPIED`
    /// (writable: it is nobody else's). Holds a shared borrow of the source while copying, so it
    /// is refused with [`Error::AlreadyBorrowed`] while a mutable view of it exists.
    ///
    /// ```
    /// use dlpack_rs::safe::Export;
    ///
    /// let t = Export::new(vec![1u16, 2, 3, 4, 5, 6]).shape(&[2, 3]).strides(&[1, 2]).versioned()?;
    /// let c = t.copy()?;
    /// assert!(c.is_copied() && c.is_contiguous());
    /// assert_eq!(c.as_slice::<u16>()?, &[1, 3, 5, 2, 4, 6]);
    /// # Ok::<(), dlpack_rs::safe::Error>(())
    /// ```
    pub fn copy(&self) -> Result<ManagedTensorVersioned, Error> {
        host_viewable(self.device())?;
        let _source = self.borrow_addressed(false)?;
        let source = super::Validated::new(self.tensor_info())?;
        // SAFETY: host memory alive while `self` is, and the shared borrow above keeps writers
        // of this crate away.
        let (storage, copy) = unsafe { super::copy_described(&source) }?;
        // SAFETY: `copy` describes the new storage, which the keepalive owns alone; writable.
        unsafe {
            super::pack_validated::<DLManagedTensorVersioned, _>(
                storage,
                copy,
                DLPACK_FLAG_BITMASK_IS_COPIED,
                super::Readers::ExportOnly,
                Some(super::AlignedBytes::as_mut_ptr),
            )
        }
    }

    /// Gives up ownership without calling the deleter: the managed struct's pointer and whether
    /// it is versioned. A read-only versioned owner hands the `READ_ONLY` flag on; a read-only
    /// legacy one cannot (the caller decides whether that may go on).
    pub(crate) fn into_raw_parts(mut self) -> (NonNull<c_void>, bool) {
        self.drop_external();
        let (ptr, versioned, read_only) = (self.ptr, self.versioned, self.read_only);
        core::mem::forget(self);
        if versioned && read_only {
            // SAFETY: the struct is still ours alone: the pointer has not been returned yet, so
            // nobody else reads or writes it during this write.
            unsafe {
                (*ptr.cast::<DLManagedTensorVersioned>().as_ptr()).flags |=
                    DLPACK_FLAG_BITMASK_READ_ONLY
            };
        }
        (ptr, versioned)
    }

    /// Drops an owner given back by [`Managed::into_raw_parts`]: calls the deleter once.
    ///
    /// # Safety
    ///
    /// `ptr` and `versioned` come from `into_raw_parts`, and nobody else took the struct since.
    #[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
    pub(crate) unsafe fn drop_raw_parts(ptr: NonNull<c_void>, versioned: bool) {
        // SAFETY: a valid, validated struct of that kind, owned here (the caller's contract).
        drop(unsafe { Managed::<AnyKind>::from_parts(ptr, versioned) });
    }
}

impl Managed<Legacy> {
    /// Takes ownership of a producer's managed tensor and validates it. On a validation error
    /// the deleter has already been called (ownership had passed).
    ///
    /// # Safety
    ///
    /// `ptr` must be NULL or point at a `DLManagedTensor` that the caller owns (nobody else will
    /// call its deleter), whose `shape` and `strides` point at `ndim` values when non-NULL,
    /// whose `data` points at memory laid out as the metadata says (on its device), and which
    /// stays valid until its deleter is called.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensor) -> Result<Self, Error> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer)?;
        // SAFETY: the caller hands over a valid, owned tensor; from here on `owned` calls the
        // deleter exactly once, on success or on error.
        let owned = unsafe { Self::from_raw_unchecked(ptr) };
        // SAFETY: the caller guarantees shape and strides point at ndim values.
        unsafe { validate(owned.raw_tensor()) }?;
        Ok(owned)
    }

    /// # Safety
    /// As [`ManagedTensor::from_raw`], and the tensor is known to be valid.
    pub(crate) unsafe fn from_raw_unchecked(ptr: NonNull<DLManagedTensor>) -> Self {
        // SAFETY: forwarded from the caller.
        unsafe { Self::from_parts(ptr.cast(), false) }
    }

    /// Gives up ownership without calling the deleter: whoever receives the pointer must.
    pub fn into_raw(self) -> *mut DLManagedTensor {
        self.into_raw_parts().0.cast().as_ptr()
    }

    /// The managed struct, still owned by `self`.
    pub fn as_raw(&self) -> *mut DLManagedTensor {
        self.ptr.cast().as_ptr()
    }
}

impl Managed<Versioned> {
    /// Takes ownership of a producer's versioned managed tensor. The major version is checked
    /// before anything else is read: on a mismatch only the deleter is called. Then flags
    /// (bits undefined by the producer's version, when that is 1.3 or older, are an error) and
    /// the tensor are validated. On any error the deleter has already been called.
    ///
    /// # Safety
    ///
    /// `ptr` must be NULL or point at a `DLManagedTensorVersioned` that the caller owns, valid
    /// until its deleter is called; for major version 1 its `shape` and `strides` must point at
    /// `ndim` values when non-NULL and its `data` at memory laid out as the metadata says.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensorVersioned) -> Result<Self, Error> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer)?;
        // SAFETY: the caller hands over a valid, owned tensor; `owned` calls the deleter once.
        let owned = unsafe { Self::from_raw_unchecked(ptr) };
        // SAFETY: the version and flags fields are valid in every major version's layout
        // prefix; the tensor is only read after the major version matched.
        unsafe {
            let m = ptr.as_ref();
            if m.version.major != DLPACK_MAJOR_VERSION {
                return Err(Error::UnsupportedVersion(m.version));
            }
            let unknown = m.flags & !DLPACK_FLAG_BITMASK_ALL_KNOWN;
            if unknown != 0 && m.version.minor <= DLPACK_MINOR_VERSION {
                return Err(Error::UnknownFlags {
                    version: m.version,
                    bits: unknown,
                });
            }
            validate(&m.dl_tensor)?;
            // Padded sub-byte data has another byte count than the packed layout validated
            // above: refused rather than read (and borrowed) over the wrong bytes.
            let dtype = m.dl_tensor.dtype;
            if m.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0
                && super::dtype::element_bits(dtype) % 8 != 0
            {
                return Err(Error::PaddedSubByte(dtype));
            }
        }
        Ok(owned)
    }

    /// # Safety
    /// As [`ManagedTensorVersioned::from_raw`], and the tensor is known to be valid.
    pub(crate) unsafe fn from_raw_unchecked(ptr: NonNull<DLManagedTensorVersioned>) -> Self {
        // SAFETY: forwarded from the caller.
        unsafe { Self::from_parts(ptr.cast(), true) }
    }

    /// Gives up ownership without calling the deleter: whoever receives the pointer must. A
    /// read-only owner ([`Managed::into_read_only`]) hands on the `READ_ONLY` flag.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        self.into_raw_parts().0.cast().as_ptr()
    }

    /// The managed struct, still owned by `self`.
    pub fn as_raw(&self) -> *mut DLManagedTensorVersioned {
        self.ptr.cast().as_ptr()
    }

    /// The producer's DLPack version.
    pub fn version(&self) -> DLPackVersion {
        // SAFETY: a live versioned struct until Drop.
        unsafe { self.ptr.cast::<DLManagedTensorVersioned>().as_ref().version }
    }
}

impl Managed<AnyKind> {
    /// The legacy owner inside, if the producer sent a legacy tensor.
    pub fn as_legacy(&self) -> Option<&ManagedTensor> {
        // SAFETY: `Managed` is `repr(C)` and its kind is only a `PhantomData`, so the two types
        // have one layout; the run-time kind was checked.
        (!self.versioned).then(|| unsafe { &*(self as *const Self).cast::<ManagedTensor>() })
    }

    /// The versioned owner inside, if the producer sent a versioned tensor.
    pub fn as_versioned(&self) -> Option<&ManagedTensorVersioned> {
        // SAFETY: as in `as_legacy`.
        self.versioned
            .then(|| unsafe { &*(self as *const Self).cast::<ManagedTensorVersioned>() })
    }

    /// The legacy owner, or `self` back for a versioned tensor.
    pub fn into_legacy(self) -> Result<ManagedTensor, Self> {
        if self.versioned {
            return Err(self);
        }
        Ok(self.recast())
    }

    /// The versioned owner, or `self` back for a legacy tensor.
    pub fn into_versioned(self) -> Result<ManagedTensorVersioned, Self> {
        if !self.versioned {
            return Err(self);
        }
        Ok(self.recast())
    }
}

impl<K: Kind> Managed<K> {
    /// The same owner, of a kind known at run time.
    pub fn into_any(self) -> AnyManaged {
        self.recast()
    }

    /// The same owner under another kind; callers check the run-time kind first.
    fn recast<L: Kind>(self) -> Managed<L> {
        let this = core::mem::ManuallyDrop::new(self);
        Managed {
            ptr: this.ptr,
            versioned: this.versioned,
            read_only: this.read_only,
            leak_if: this.leak_if,
            guard: this.guard,
            external: this.external,
            _kind: PhantomData,
        }
    }
}

impl From<ManagedTensor> for AnyManaged {
    fn from(t: ManagedTensor) -> Self {
        t.recast()
    }
}

impl From<ManagedTensorVersioned> for AnyManaged {
    fn from(t: ManagedTensorVersioned) -> Self {
        t.recast()
    }
}

impl<K: Kind> Drop for Managed<K> {
    fn drop(&mut self) {
        if self.guard.is_some_and(|leak| leak()) || self.leak_if.is_some_and(|leak| leak()) {
            // The external context is released by code that handles shutdown itself.
            self.drop_external();
            return;
        }
        // SAFETY: we own the tensor; reading `deleter` is valid until it runs, and it runs once.
        unsafe {
            if self.versioned {
                let ptr = self.ptr.cast::<DLManagedTensorVersioned>();
                if let Some(deleter) = ptr.as_ref().deleter {
                    deleter(ptr.as_ptr());
                }
            } else {
                let ptr = self.ptr.cast::<DLManagedTensor>();
                if let Some(deleter) = ptr.as_ref().deleter {
                    deleter(ptr.as_ptr());
                }
            }
        }
        self.drop_external();
    }
}

impl<K: Kind> fmt::Debug for Managed<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape())
            .field("strides", &self.raw_strides())
            .field("dtype", &self.dtype())
            .field("device", &self.device())
            .field("byte_offset", &self.byte_offset())
            .field("flags", &self.flags())
            .finish()
    }
}

/// The checks and the borrow of a C-contiguous slice of `T` over a tensor, for an owner and for
/// a non-owning view alike: `T`'s dtype, plain CPU memory, C-contiguous, non-NULL and aligned
/// (unless empty); then the registry borrow, `more` (a second checker's borrow on top of it),
/// and, for elements with invalid bit patterns (`bool`), the bytes. Returns the first element,
/// the length and the borrow.
///
/// # Safety
///
/// `first` (the address of the first element), `shape`, `strides`, `dtype` and `device` describe
/// a tensor validated by `layout::check` whose memory stays alive and in place while the returned
/// pointer is used.
pub(crate) unsafe fn contiguous_slice_parts<T: Element>(
    first: *mut c_void,
    shape: &[i64],
    strides: Option<&[i64]>,
    dtype: DLDataType,
    device: DLDevice,
    exclusive: bool,
    more: impl FnOnce(BorrowToken) -> Result<BorrowToken, Error>,
) -> Result<(*mut T, usize, BorrowToken), Error> {
    dtype_is::<T>(dtype)?;
    host_viewable(device)?;
    if !strides.is_none_or(|s| is_c_contiguous(shape, s)) {
        return Err(Error::NotContiguous);
    }
    // Validated: the product does not overflow unless a zero extent makes the tensor empty.
    if shape.contains(&0) {
        return Ok((NonNull::<T>::dangling().as_ptr(), 0, BorrowToken::EMPTY));
    }
    let len: usize = shape.iter().map(|&d| d as usize).product();
    let ptr = first_of::<T>(first)?;
    // Borrow before reading anything: no exclusive view of these bytes exists from here on.
    // Contiguous: the bytes are exactly `len` elements from the first.
    let start = ptr as usize;
    let token = BorrowToken::acquire(
        start,
        start.wrapping_add(len * core::mem::size_of::<T>()),
        exclusive,
    )?;
    let token = more(token)?;
    // SAFETY: host-accessible, non-NULL, aligned, contiguous memory of `len` elements of T's
    // dtype (validated not to overflow), alive by this function's contract, and borrowed above
    // so no view elsewhere writes it.
    let bytes =
        unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), len * core::mem::size_of::<T>()) };
    if !T::is_valid_bytes(bytes) {
        return Err(Error::InvalidBool);
    }
    Ok((ptr, len, token))
}

/// Registers a borrow of the bytes a validated tensor's elements address, from the lowest to
/// the highest element its strides reach: those of the elements' progression (the gcd of the
/// byte strides apart, `safe::overlap::Span`), or the whole range for sub-byte elements;
/// nothing for an empty tensor. `first` is the address of the first element (never
/// dereferenced).
pub(crate) fn addressed_token(
    first: *mut c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    exclusive: bool,
) -> Result<BorrowToken, Error> {
    if shape.contains(&0) {
        return Ok(BorrowToken::EMPTY);
    }
    let (mut low, mut high) = (0i64, 0i64);
    for (&extent, &stride) in shape.iter().zip(strides.iter()) {
        // Validated (`layout::check`): the addressed range does not overflow.
        let span = stride.wrapping_mul(extent - 1);
        if span < 0 {
            low = low.wrapping_add(span);
        } else {
            high = high.wrapping_add(span);
        }
    }
    let bits = super::dtype::element_bits(dtype);
    if bits % 8 != 0 {
        // Sub-byte elements share bytes with their neighbours: the whole range.
        return BorrowToken::acquire_elements(first as usize, low, high, bits, exclusive);
    }
    // Every element starts a multiple of the gcd of the byte strides (of the axes it steps
    // along) from the lowest one: the borrow names those elements' bytes alone, so views of
    // interleaved elements (`z[::2]`, `z[1::2]`) do not conflict (`safe::overlap`).
    let width = (bits / 8) as usize;
    let period = shape
        .iter()
        .zip(strides.iter())
        .filter(|&(&extent, _)| extent > 1)
        .fold(0usize, |g, (_, &stride)| {
            super::overlap::gcd(g, (stride.unsigned_abs() as usize).wrapping_mul(width))
        });
    // Validated (`layout::check`): the addressed bytes lie within an isize of `first`.
    let start = (first as usize).wrapping_add_signed(low as isize * width as isize);
    let end = (first as usize).wrapping_add_signed((high as isize + 1) * width as isize);
    BorrowToken::acquire_strided(start, end, period, width, exclusive)
}

/// Whether safe code may read (or write) the memory of a tensor on `device` from the host: only
/// plain CPU memory. Device memory is not addressable, and pinned or managed memory
/// (`CUDA_HOST`, `ROCM_HOST`, `CUDA_MANAGED`), though addressable, may still be written by the
/// producer's queued device work, which a host view would race (nothing here can wait for it).
pub(super) fn host_viewable(device: crate::ffi::DLDevice) -> Result<(), Error> {
    if device.device_type.is_host_viewable() {
        Ok(())
    } else {
        Err(Error::NotHostAccessible(device))
    }
}

/// `Ok` when `dtype` is `T`'s; the mismatch otherwise (every typed view asks this first).
#[inline]
pub(super) fn dtype_is<T: Element>(dtype: DLDataType) -> Result<(), Error> {
    if dtype == T::DTYPE {
        Ok(())
    } else {
        Err(Error::DtypeMismatch {
            expected: T::DTYPE,
            found: dtype,
        })
    }
}

/// `first` as the first element of a non-empty tensor of `T`: non-NULL and aligned for `T`.
#[inline]
pub(super) fn first_of<T: Element>(first: *mut c_void) -> Result<*mut T, Error> {
    let ptr = first.cast::<T>();
    if ptr.is_null() {
        return Err(Error::NullData);
    }
    if !ptr.is_aligned() {
        return Err(Error::Misaligned {
            align: core::mem::align_of::<T>(),
            address: ptr as usize,
        });
    }
    Ok(ptr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};

    static DROPPED: AtomicUsize = AtomicUsize::new(0);

    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn owner() -> ManagedTensorVersioned {
        let info = TensorInfo::contiguous(
            NonNull::<u8>::dangling().as_ptr().cast(),
            super::super::cpu_device(),
            super::super::dtype_u8(),
            alloc::vec![0],
        );
        // SAFETY: an empty tensor: no memory is described.
        unsafe {
            super::super::pack_owned::<DLManagedTensorVersioned, _>(
                Counted,
                info,
                0,
                super::super::Readers::ExportOnly,
                None,
            )
        }
        .unwrap()
    }

    /// The crate's leak guard stays in force whatever a safe caller sets afterwards (a
    /// `PyTensor`'s shutdown guard, reachable through `DerefMut`), and travels through every
    /// conversion of kind.
    #[test]
    fn the_crate_guard_cannot_be_replaced_from_safe_code() {
        let before = DROPPED.load(Ordering::SeqCst);
        let mut t = owner();
        t.set_leak_guard(|| true);
        t.leak_on_drop_if(|| false);
        let any = t.into_any();
        let back = any.into_versioned().unwrap();
        let raw = back.as_raw();
        drop(back);
        assert_eq!(
            DROPPED.load(Ordering::SeqCst),
            before,
            "leaked, not deleted"
        );
        // SAFETY: the owner leaked the tensor without calling its deleter: called once here.
        unsafe { ((*raw).deleter.unwrap())(raw) };
        assert_eq!(DROPPED.load(Ordering::SeqCst), before + 1);
        let before = before + 1;
        // Without the guard, the caller's predicate decides alone.
        let mut t = owner();
        t.leak_on_drop_if(|| false);
        drop(t);
        assert_eq!(DROPPED.load(Ordering::SeqCst), before + 1);
        let mut t = owner();
        t.leak_on_drop_if(|| true);
        let raw = t.as_raw();
        drop(t);
        assert_eq!(DROPPED.load(Ordering::SeqCst), before + 1);
        // SAFETY: leaked by the owner, not deleted: deleted once here.
        unsafe { ((*raw).deleter.unwrap())(raw) };
        assert_eq!(DROPPED.load(Ordering::SeqCst), before + 2);
    }

    static EXT_LOG: AtomicUsize = AtomicUsize::new(0);
    static EXT_REFUSE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

    /// A test checker: counts acquires (x1), releases (x100) and context drops (x10000) in
    /// `EXT_LOG`; refuses while `EXT_REFUSE` is set.
    unsafe fn ext_acquire(ctx: *mut c_void, exclusive: bool) -> Result<(), Error> {
        assert_eq!(ctx as usize, 0x5EED);
        if EXT_REFUSE.load(Ordering::SeqCst) {
            return Err(Error::AlreadyBorrowed { exclusive });
        }
        EXT_LOG.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    unsafe fn ext_release(ctx: *mut c_void, _exclusive: bool) {
        assert_eq!(ctx as usize, 0x5EED);
        EXT_LOG.fetch_add(100, Ordering::SeqCst);
    }
    unsafe fn ext_drop(ctx: *mut c_void) {
        assert_eq!(ctx as usize, 0x5EED);
        EXT_LOG.fetch_add(10_000, Ordering::SeqCst);
    }
    static EXT_API: ExternalApi = ExternalApi {
        acquire: ext_acquire,
        release: ext_release,
        drop_ctx: ext_drop,
    };

    /// Every view of an owner with an external checker takes its borrow after the registry's and
    /// releases it with the view; a refusal refuses the view (and leaves no registry borrow);
    /// the context is released once, when the owner drops or gives the tensor up.
    #[test]
    fn an_external_checker_sees_every_view_and_its_context_is_released_once() {
        let external = External {
            api: &EXT_API,
            ctx: 0x5EED as *mut c_void,
        };
        let mut t = crate::safe::Export::new(alloc::vec![1u8, 2, 3])
            .versioned()
            .unwrap();
        // SAFETY: the test context is a plain number the test functions only compare.
        unsafe { t.set_external(external) };
        EXT_LOG.store(0, Ordering::SeqCst);
        {
            let view = t.as_slice::<u8>().unwrap();
            assert_eq!(*view, [1, 2, 3]);
            assert_eq!(EXT_LOG.load(Ordering::SeqCst), 1);
        }
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 101);
        drop(t.as_mut_slice::<u8>().unwrap());
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 202);
        drop(t.copy().unwrap());
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 303);
        EXT_REFUSE.store(true, Ordering::SeqCst);
        assert_eq!(
            t.as_mut_slice::<u8>().unwrap_err(),
            Error::AlreadyBorrowed { exclusive: true }
        );
        EXT_REFUSE.store(false, Ordering::SeqCst);
        // The refused view left no registry borrow behind.
        drop(t.as_mut_slice::<u8>().unwrap());
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 404);
        drop(t);
        assert_eq!(
            EXT_LOG.load(Ordering::SeqCst),
            10_404,
            "context released once, on drop"
        );
        // Giving the tensor up releases the context too; setting a second one releases the first.
        let mut t = crate::safe::Export::new(alloc::vec![0u8])
            .versioned()
            .unwrap();
        // SAFETY: as above.
        unsafe {
            t.set_external(external);
            t.set_external(external);
        }
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 20_404);
        let raw = t.into_raw();
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 30_404);
        // SAFETY: our own export, deleted once.
        unsafe { ((*raw).deleter.unwrap())(raw) };
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 30_404);
    }
}
