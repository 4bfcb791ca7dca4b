//! [`Managed`]: the validated owner of a producer's managed tensor.

pub(super) mod described;
/// The strided-layout engine of views of any layout.
#[cfg_attr(not(feature = "ndarray"), allow(dead_code))] // used by the layers above safe/
pub(crate) mod strided;
#[cfg(test)]
pub(super) mod test_checker;
pub(crate) mod views;

use alloc::borrow::Cow;
use core::ffi::c_void;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_ALL_KNOWN, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
};
use crate::safe::import::views::External;
use crate::safe::layout::{check, is_c_contiguous};
use crate::safe::{Error, TensorInfo};

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::DLManagedTensor {}
    impl Sealed for super::DLManagedTensorVersioned {}
    impl Sealed for super::AnyKind {}
}

/// Which managed struct a [`Managed`] owns: [`DLManagedTensor`] (legacy: no version, no flags),
/// [`DLManagedTensorVersioned`] (DLPack >= 1.0) or [`AnyKind`] (sealed).
pub trait Kind: sealed::Sealed + 'static {}

/// The [`Kind`] of an [`AnyManaged`]: either struct, told apart at run time (Python imports).
#[derive(Debug)]
pub enum AnyKind {}

impl Kind for DLManagedTensor {}
impl Kind for DLManagedTensorVersioned {}
impl Kind for AnyKind {}

/// An owned legacy [`DLManagedTensor`].
pub type ManagedTensor = Managed<DLManagedTensor>;
/// An owned [`DLManagedTensorVersioned`].
pub type ManagedTensorVersioned = Managed<DLManagedTensorVersioned>;
/// An owned managed tensor of either kind.
pub type AnyManaged = Managed<AnyKind>;

/// An owned managed tensor, validated when made, whose `Drop` calls the producer's deleter once;
/// its views take borrows in the [borrow registry](super#the-borrow-registry).
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
    /// Read-only by the owner's decision, whatever the producer's flags say.
    read_only: bool,
    /// When set and true at drop time, the tensor is leaked instead of deleted.
    leak_if: Option<fn() -> bool>,
    /// The same, set by this crate only, so that no safe call (`leak_on_drop_if`) removes it.
    guard: Option<fn() -> bool>,
    /// A borrow checker outside this crate that every view must satisfy too (rust-numpy's).
    pub(super) external: Option<External>,
    _kind: PhantomData<K>,
}

// SAFETY: DLPack lets the deleter run on any thread; nothing is tied to the making thread.
unsafe impl<K: Kind> Send for Managed<K> {}
// SAFETY: `&Managed` reads metadata the producer keeps constant; data views go through the
// thread-safe borrow registry, and exclusive ones need `&mut`.
unsafe impl<K: Kind> Sync for Managed<K> {}

/// Validates a `DLTensor` a producer handed over.
///
/// # Safety
/// `t.shape` and `t.strides`, when non-NULL and `t.ndim > 0`, must point at `t.ndim` readable
/// `i64`s (the DLPack contract).
pub(crate) unsafe fn validate(t: &DLTensor) -> Result<(), Error> {
    if t.ndim < 0 {
        return Err(Error::NegativeNdim(t.ndim));
    }
    if t.ndim as usize > crate::safe::TensorInfo::MAX_NDIM {
        return Err(Error::TooManyDims(t.ndim));
    }
    if t.ndim > 0 && t.shape.is_null() {
        return Err(Error::NullShape);
    }
    // SAFETY: this function's contract; ndim and NULL were checked above.
    let (shape, strides) = unsafe { (raw_shape(t), raw_strides(t)) };
    check(shape, strides, t.dtype, t.byte_offset, t.data.is_null()).map(|_| ())
}

/// The address of a validated `t`'s first element (`data + byte_offset`), NULL for NULL data.
#[inline]
pub(crate) fn first_address(t: &DLTensor) -> *mut c_void {
    if t.data.is_null() {
        return core::ptr::null_mut();
    }
    // Validated: the offset fits in isize; wrapping_add suits device pointers too.
    t.data
        .cast::<u8>()
        .wrapping_add(t.byte_offset as usize)
        .cast()
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
    /// been validated (or, in `from_raw`, is validated before the owner is used for anything
    /// but that check and its drop, which reads only the deleter); nobody else calls its deleter.
    pub(in crate::safe) unsafe fn from_parts(ptr: NonNull<c_void>, versioned: bool) -> Self {
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

    /// The versioned struct, when that is the kind owned.
    #[inline]
    fn versioned_struct(&self) -> Option<&DLManagedTensorVersioned> {
        // SAFETY: `ptr` is a live managed struct of the kind `versioned` says until Drop.
        self.versioned.then(|| unsafe { self.ptr.cast().as_ref() })
    }

    /// The underlying `DLTensor` (validated at construction).
    pub fn raw_tensor(&self) -> &DLTensor {
        match self.versioned_struct() {
            Some(m) => &m.dl_tensor,
            // SAFETY: a live legacy struct until Drop (`versioned` is false).
            None => unsafe { &self.ptr.cast::<DLManagedTensor>().as_ref().dl_tensor },
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

    /// Strides in elements; compact ones when the producer sent NULL.
    pub fn strides(&self) -> Cow<'_, [i64]> {
        self.parts().strides()
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

    /// The producer's `DLPACK_FLAG_BITMASK_*` flags (0 if legacy), plus this owner's `READ_ONLY`.
    pub fn flags(&self) -> u64 {
        let producer = self.versioned_struct().map_or(0, |m| m.flags);
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

    /// Leaks the tensor instead of calling the deleter if `leak_if()` is true at drop time (for
    /// runtimes whose deleters must not run at shutdown); a later call replaces the predicate.
    pub fn leak_on_drop_if(&mut self, leak_if: fn() -> bool) {
        self.leak_if = Some(leak_if);
    }

    fn drop_external(&mut self) {
        // SAFETY: this owner's own context, released once (`set_external`), after every view.
        unsafe { views::replace_external(&mut self.external, None) }
    }

    /// Sets the crate's own leak guard, which no public call removes.
    #[allow(dead_code)] // used by the layers above safe/
    pub(crate) fn set_leak_guard(&mut self, leak_if: fn() -> bool) {
        self.guard = Some(leak_if);
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Validated: the product does not overflow unless a zero extent makes it empty.
        let shape = self.shape();
        if shape.contains(&0) {
            return 0;
        }
        shape.iter().map(|&d| d as usize).product()
    }

    /// Bytes the elements occupy packed densely (`ceil(numel * bits * lanes / 8)`).
    pub fn nbytes(&self) -> usize {
        let bits = crate::safe::dtype::element_bits(self.dtype()) as u128;
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
        first_address(self.raw_tensor())
    }

    /// The metadata as a [`TensorInfo`] (strides `None` when the producer sent NULL).
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

    /// Gives up ownership without calling the deleter (`READ_ONLY` set if read-only and versioned).
    pub(crate) fn into_raw_parts(mut self) -> (NonNull<c_void>, bool) {
        self.drop_external();
        let (ptr, versioned, read_only) = (self.ptr, self.versioned, self.read_only);
        core::mem::forget(self);
        if versioned && read_only {
            // SAFETY: the struct is still ours alone: the pointer has not been returned yet.
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
    /// `ptr` and `versioned` come from `into_raw_parts`, and nobody else took the struct since.
    #[allow(dead_code)] // used by the layers above safe/
    pub(crate) unsafe fn drop_raw_parts(ptr: NonNull<c_void>, versioned: bool) {
        // SAFETY: the caller's contract.
        drop(unsafe { Managed::<AnyKind>::from_parts(ptr, versioned) });
    }

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

impl Managed<DLManagedTensor> {
    /// Takes ownership of a producer's managed tensor and validates it; an error calls the deleter.
    ///
    /// # Safety
    /// `ptr` is NULL or a `DLManagedTensor` the caller owns (nobody else calls its deleter),
    /// whose non-NULL `shape` and `strides` point at `ndim` values, whose `data` is laid out as
    /// the metadata says (on its device), and which stays valid until its deleter is called.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensor) -> Result<Self, Error> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer)?;
        // SAFETY: the caller hands over a valid, owned legacy tensor; `owned` calls the deleter
        // once, and until `validate` below accepts it only hands it its tensor or is dropped.
        let owned = unsafe { Self::from_parts(ptr.cast(), false) };
        // SAFETY: the caller guarantees shape and strides point at ndim values.
        unsafe { validate(owned.raw_tensor()) }?;
        Ok(owned)
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

impl Managed<DLManagedTensorVersioned> {
    /// Takes ownership of a versioned managed tensor and validates it; an error calls the deleter.
    ///
    /// # Safety
    /// `ptr` must be NULL or point at a `DLManagedTensorVersioned` that the caller owns, valid
    /// until its deleter is called; for major version 1 its `shape` and `strides` must point at
    /// `ndim` values when non-NULL and its `data` at memory laid out as the metadata says.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensorVersioned) -> Result<Self, Error> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer)?;
        // SAFETY: the caller hands over a valid, owned versioned tensor; `owned` calls the
        // deleter once, and is only dropped (reading only the deleter, which dlpack.h keeps in
        // place across major versions) until the checks below accept it.
        let owned = unsafe { Self::from_parts(ptr.cast(), true) };
        // SAFETY: every major version starts with these fields; the tensor is read only after
        // the major version matched.
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
            // Padded sub-byte data has another byte count than validated: refuse it.
            let dtype = m.dl_tensor.dtype;
            if m.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0
                && crate::safe::dtype::element_bits(dtype) % 8 != 0
            {
                return Err(Error::PaddedSubByte(dtype));
            }
        }
        Ok(owned)
    }

    /// Gives up ownership without calling the deleter (with `READ_ONLY` if read-only).
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
        // SAFETY: `repr(C)` with the kind only in a `PhantomData`; the run-time kind was checked.
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

#[cfg(test)]
mod tests;
