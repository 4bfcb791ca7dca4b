//! How tensors and ndarray arrays meet (feature `ndarray`): imported tensors viewed as
//! [`ArrayViewD`] / [`ArrayViewMutD`], and [`Array`] / [`ArcArray`] exported without a copy.
//!
//! # Import
//!
//! [`Managed::as_array`] (on every owner: `ManagedTensor`, `ManagedTensorVersioned` and, with
//! feature `pyo3`, `PyTensor`) borrows the elements as a [`ReadArray`] guard (an ndarray
//! [`ArrayRef`]) with the producer's exact layout: any strides, negative ones included,
//! size-1 dimensions with odd strides, and the `byte_offset`. [`Managed::as_array_mut`] hands
//! out a [`WriteArray`] when the tensor is also writable (no `READ_ONLY` flag) and no two
//! indices address the same element. Both are registered in the
//! [borrow registry](super#the-borrow-registry) like slices. Either refuses, with a
//! [`safe::Error`](Error), a dtype other than `T`'s, memory the CPU cannot address, and a
//! first element that is not aligned for `T`.
//!
//! ```
//! use dlpack_rs::safe::Export;
//!
//! // A 2x3 tensor seen transposed (strides 1, 3): ndarray gets the same 3x2 layout.
//! let t = Export::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
//!     .shape(&[3, 2])
//!     .strides(&[1, 3])
//!     .versioned()?;
//! let a = t.as_array::<f32>()?;
//! assert_eq!(a.shape(), &[3, 2]);
//! assert_eq!(a[[0, 1]], 4.0);
//! assert_eq!(a.strides(), &[1, 3]);
//! # Ok::<(), dlpack_rs::safe::Error>(())
//! ```
//!
//! # Export
//!
//! [`Array<T, D>`] and [`ArcArray<T, D>`] implement [`IntoDLPack`](crate::IntoDLPack): the array itself becomes
//! the keepalive, and its shape, strides (negative ones included) and first element are
//! described as they are, so nothing is copied or made contiguous.
//!
//! - An `Array` is exported writable.
//! - An `ArcArray` is exported writable only when it is the sole owner of its data
//!   ([`ArcArray::is_unique`]) at the time of the export; after that it belongs to the
//!   managed tensor, so no new owner can appear. A shared `ArcArray` is exported read-only
//!   (versioned only: a legacy export of read-only data is refused).
//!
//! ```
//! use dlpack_rs::IntoDLPack;
//! use ndarray::{s, Array2};
//!
//! let a = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as u16);
//! let reversed = a.slice_move(s![.., ..;-2]); // every other column, right to left
//! let t = reversed.into_managed_tensor_versioned()?;
//! assert_eq!(t.shape(), &[3, 2]);
//! assert_eq!(&*t.strides(), &[4, -2]);
//! assert_eq!(t.as_array::<u16>()?[[1, 0]], 7);
//! # Ok::<(), dlpack_rs::safe::Error>(())
//! ```
//!
//! # Derive fields
//!
//! `Array` and `ArcArray` are also [`Buffer`](super::Buffer)s, so a `#[dlpack(data)]` field may be one. As a
//! buffer an array is flat storage: the elements from its lowest to its highest address
//! (for a non-contiguous array that includes the elements it skips). Give the struct
//! `shape` / `strides` fields for another layout; to export the array's own layout, use its
//! [`IntoDLPack`](crate::IntoDLPack) implementation instead. An `ArcArray` field is always exported read-only,
//! because the struct's other methods could clone it while a consumer writes.

use alloc::vec::Vec;
use core::ffi::c_void;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

#[cfg(doc)]
use ::ndarray::{ArcArray, Array};
use ::ndarray::{
    ArrayBase, ArrayRef, ArrayView, ArrayViewD, ArrayViewMut, ArrayViewMutD, Axis, Data, Dimension,
    IxDyn, ShapeBuilder,
};

use crate::ffi::{DLDataType, DLDevice};

use super::borrow::BorrowToken;
use super::{Element, Error, Kind, Managed};

/// A tensor's layout rewritten for ndarray's constructors: every stride non-negative, the
/// pointer at the lowest addressed element, and the axes to invert afterwards.
pub(crate) struct Normalized<T> {
    ptr: *mut T,
    shape: Vec<usize>,
    strides: Vec<usize>,
    inverted: Vec<usize>,
}

impl<T> Normalized<T> {
    /// The shape and strides as `D`, which has `self.shape().len()` dimensions.
    fn dims<D: Dimension>(&self) -> ::ndarray::StrideShape<D> {
        let mut shape = D::zeros(self.shape.len());
        shape.slice_mut().copy_from_slice(&self.shape);
        let mut strides = D::zeros(self.strides.len());
        strides.slice_mut().copy_from_slice(&self.strides);
        shape.strides(strides)
    }

    /// The array view this layout describes.
    ///
    /// # Safety
    ///
    /// The layout came from [`strided_parts`], whose memory stays alive and borrowed (shared or
    /// exclusive) for `'a`; `D` has as many dimensions as the layout (any, for `IxDyn`).
    pub(crate) unsafe fn view<'a, D: Dimension>(&self) -> ArrayView<'a, T, D> {
        // SAFETY: forwarded from this function's contract: non-negative strides from the lowest
        // addressed element stay in the producer's validated buffer, alive and borrowed for 'a.
        let mut array = unsafe { ArrayView::from_shape_ptr(self.dims::<D>(), self.ptr) };
        for &axis in &self.inverted {
            array.invert_axis(Axis(axis));
        }
        array
    }

    /// The mutable array view this layout describes.
    ///
    /// # Safety
    ///
    /// As [`Normalized::view`], and the layout was borrowed exclusively from writable memory
    /// (`strided_parts` with `exclusive`: no two indices address the same element), and no
    /// other view made from this layout is alive during `'a`.
    pub(crate) unsafe fn view_mut<'a, D: Dimension>(&self) -> ArrayViewMut<'a, T, D> {
        // SAFETY: as in `view`; exclusive and writable by this function's contract.
        let mut array = unsafe { ArrayViewMut::from_shape_ptr(self.dims::<D>(), self.ptr) };
        for &axis in &self.inverted {
            array.invert_axis(Axis(axis));
        }
        array
    }
}

/// Checks that `T` may view a tensor's elements and rewrites its layout for ndarray.
fn normalize<T: Element>(
    first: *mut c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    device: DLDevice,
) -> Result<Normalized<T>, Error> {
    super::managed_views::dtype_is::<T>(dtype)?;
    super::managed_views::host_viewable(device)?;
    // Validated: no negative extent.
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    if shape.contains(&0) {
        // ndarray needs the product of the non-zero extents to fit in `isize`, even when
        // another extent is zero (DLPack does not bound it then).
        shape
            .iter()
            .filter(|&&d| d != 0)
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or(Error::Overflow)?;
        // Nothing is ever read: a dangling, aligned pointer and zero strides are enough.
        let strides = shape.iter().map(|_| 0).collect();
        return Ok(Normalized {
            ptr: NonNull::<T>::dangling().as_ptr(),
            shape,
            strides,
            inverted: Vec::new(),
        });
    }
    let first = super::managed_views::first_of::<T>(first)?;
    let mut ptr = first;
    let mut out = Vec::with_capacity(shape.len());
    let mut inverted = Vec::new();
    for (axis, (&extent, &stride)) in shape.iter().zip(strides.iter()).enumerate() {
        if extent <= 1 {
            // Never stepped along: any stride is legal in DLPack, ndarray only needs one that
            // cannot overflow.
            out.push(0);
            continue;
        }
        let step = isize::try_from(stride).map_err(|_| Error::Overflow)?;
        if step < 0 {
            // Validated: `stride * (extent - 1)` elements stay within the addressed range,
            // which fits in `isize` bytes.
            ptr = ptr.wrapping_offset(step * (extent as isize - 1));
            inverted.push(axis);
        }
        out.push(step.unsigned_abs());
    }
    Ok(Normalized {
        ptr,
        shape,
        strides: out,
        inverted,
    })
}

/// The checks and the borrow of an ndarray view of `T` over a tensor with any strides, for an
/// owner and for a non-owning view alike: `T`'s dtype, plain CPU memory, non-NULL and aligned
/// (unless empty), for an exclusive view no element addressed twice; then the registry borrow
/// of every addressed byte, `more` (a second checker's borrow on top of it), and, for elements
/// with invalid bit patterns (`bool`), every element. Returns the layout and the borrow.
///
/// # Safety
///
/// `first` (the address of the first element), `shape`, `strides`, `dtype` and `device` describe
/// a tensor validated by `layout::check` whose memory stays alive and in place while a view
/// made from the returned layout is used.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn strided_parts<T: Element>(
    first: *mut c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    device: DLDevice,
    exclusive: bool,
    more: impl FnOnce(BorrowToken) -> Result<BorrowToken, Error>,
) -> Result<(Normalized<T>, BorrowToken), Error> {
    let n = normalize::<T>(first, shape, strides, dtype, device)?;
    if exclusive && overlaps(&n.shape, &n.strides) {
        return Err(Error::Overlapping);
    }
    let token = super::managed_views::addressed_token(first, shape, strides, dtype, exclusive)?;
    let token = more(token)?;
    check_values::<T>(&n)?;
    Ok((n, token))
}

/// The checks and the borrow of a raw pointer to the elements of a tensor on any device (no
/// host view is made, nothing is read): `T`'s dtype, non-NULL and aligned (unless empty), for
/// an exclusive borrow no element addressed twice; then the registry borrow of every addressed
/// byte (device addresses are registered as host ones are: CUDA and ROCm share one virtual
/// address space with the host, and an address that collides can only refuse a view, never
/// grant one) and `more`. Returns the first element and the borrow.
pub(crate) fn raw_parts<T: Element>(
    first: *mut c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    exclusive: bool,
    more: impl FnOnce(BorrowToken) -> Result<BorrowToken, Error>,
) -> Result<(*mut T, BorrowToken), Error> {
    super::managed_views::dtype_is::<T>(dtype)?;
    let mut first = first.cast::<T>();
    if !shape.contains(&0) {
        first = super::managed_views::first_of::<T>(first.cast())?;
        let abs =
            |v: &[i64]| -> Vec<usize> { v.iter().map(|&d| d.unsigned_abs() as usize).collect() };
        if exclusive && overlaps(&abs(shape), &abs(strides)) {
            return Err(Error::Overlapping);
        }
    }
    let token =
        super::managed_views::addressed_token(first.cast(), shape, strides, dtype, exclusive)?;
    Ok((first, more(token)?))
}

/// Calls [`Element::is_valid_bytes`] once on every element address the layout reaches; nothing
/// for types where every bit pattern is valid ([`for_each_reached`] bounds the work by the
/// memory, never by the number of indices).
fn check_values<T: Element>(n: &Normalized<T>) -> Result<(), Error> {
    if T::ANY_BIT_PATTERN {
        return Ok(());
    }
    for_each_reached(&n.shape, &n.strides, |offset| {
        // SAFETY: a non-empty, validated tensor on host memory: every offset reached by indices
        // within the shape addresses `size_of::<T>()` readable bytes of the producer's buffer
        // (the normalised pointer is the lowest addressed element, the strides step towards
        // higher addresses); `for_each_reached` passes only such offsets.
        let bytes = unsafe {
            core::slice::from_raw_parts(
                n.ptr.wrapping_add(offset).cast::<u8>(),
                core::mem::size_of::<T>(),
            )
        };
        if T::is_valid_bytes(bytes) {
            Ok(())
        } else {
            Err(Error::InvalidBool)
        }
    })
}

/// Calls `f` with every element offset some index within `shape` reaches (strides in elements,
/// none negative), each at least once, and with no other offset. The work is bounded by the
/// memory, never by the number of indices: a broadcast or overlapping layout may name far more
/// indices than its memory holds elements (2^62 indices of one byte), so axes that do not move
/// (stride 0, extent 1) are dropped, and an overlapping rest with more indices than its span
/// has bit-set words is walked as the set of offsets it reaches ([`for_each_reached_in_set`]).
fn for_each_reached(
    shape: &[usize],
    strides: &[usize],
    f: impl FnMut(usize) -> Result<(), Error>,
) -> Result<(), Error> {
    if shape.contains(&0) {
        return Ok(());
    }
    let (shape, strides): (Vec<usize>, Vec<usize>) = shape
        .iter()
        .zip(strides)
        .filter(|&(&extent, &stride)| extent > 1 && stride > 0)
        .map(|(&extent, &stride)| (extent, stride))
        .unzip();
    let span = span_of(&shape, &strides);
    let indices = shape
        .iter()
        .try_fold(1usize, |n, &e| n.checked_mul(e))
        .unwrap_or(usize::MAX);
    if !overlaps(&shape, &strides) || indices <= span / 64 {
        // Every index a distinct element (at most as many as the memory holds), or fewer indices
        // than the bit set would have words: a repeated offset is harmless.
        return for_each_offset(&shape, &strides, f);
    }
    for_each_reached_in_set(&shape, &strides, f)
}

/// The number of elements from the lowest to the highest offset a non-empty layout reaches.
fn span_of(shape: &[usize], strides: &[usize]) -> usize {
    shape
        .iter()
        .zip(strides)
        .map(|(&e, &s)| (e - 1) * s)
        .sum::<usize>()
        + 1
}

/// [`for_each_reached`] through a bit set over the span (in elements, at most the memory's
/// size), each offset once, in increasing order: per axis, the set united with itself shifted
/// by every multiple of the stride, by doubling (log2(extent) unions of the span per axis).
/// Non-empty layouts only.
fn for_each_reached_in_set(
    shape: &[usize],
    strides: &[usize],
    f: impl FnMut(usize) -> Result<(), Error>,
) -> Result<(), Error> {
    let span = span_of(shape, strides);
    let mut reached = BitSet::new(span)?;
    // Offset 0: the first element, before any axis moves.
    reached.words[0] = 1;
    for (&extent, &stride) in shape.iter().zip(strides) {
        // The union of `reached` shifted by 0, 1, ..., extent - 1 strides, as consecutive
        // blocks of 2^k multiples for the bits of `extent` (`pow`: the union over the first
        // `pow_len` multiples).
        let mut result = BitSet::new(span)?;
        let mut pow = reached;
        let (mut pow_len, mut placed, mut rest) = (1usize, 0usize, extent);
        while rest > 0 {
            if rest & 1 == 1 {
                result.union_shifted(&pow, placed * stride);
                placed += pow_len;
            }
            rest >>= 1;
            if rest > 0 {
                let copy = pow.clone();
                pow.union_shifted(&copy, pow_len * stride);
                pow_len *= 2;
            }
        }
        reached = result;
    }
    reached.for_each(f)
}

/// Calls `f` with the element offset of every index within `shape` (odometer order).
fn for_each_offset(
    shape: &[usize],
    strides: &[usize],
    mut f: impl FnMut(usize) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut index = alloc::vec![0usize; shape.len()];
    loop {
        f(index.iter().zip(strides).map(|(i, s)| i * s).sum())?;
        // Odometer increment, last axis fastest.
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return Ok(());
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// A fixed-size set of offsets `0..len`.
#[derive(Clone)]
struct BitSet {
    words: Vec<u64>,
    len: usize,
}

impl BitSet {
    /// The empty set (`OutOfMemory` rather than an abort: `len` is the span of memory the
    /// producer describes).
    fn new(len: usize) -> Result<Self, Error> {
        let mut words = Vec::new();
        words
            .try_reserve_exact(len.div_ceil(64))
            .map_err(|_| Error::OutOfMemory)?;
        words.resize(len.div_ceil(64), 0);
        Ok(BitSet { words, len })
    }

    /// `self |= other << shift`, dropping what falls past the end.
    fn union_shifted(&mut self, other: &BitSet, shift: usize) {
        let (words, bits) = (shift / 64, shift % 64);
        for i in (words..self.words.len()).rev() {
            let src = i - words;
            let mut w = other.words[src] << bits;
            if bits > 0 && src > 0 {
                w |= other.words[src - 1] >> (64 - bits);
            }
            self.words[i] |= w;
        }
        if self.len % 64 != 0 {
            let last = self.words.len() - 1;
            self.words[last] &= (1u64 << (self.len % 64)) - 1;
        }
    }

    fn for_each(&self, mut f: impl FnMut(usize) -> Result<(), Error>) -> Result<(), Error> {
        for (i, &word) in self.words.iter().enumerate() {
            let mut w = word;
            while w != 0 {
                f(i * 64 + w.trailing_zeros() as usize)?;
                w &= w - 1;
            }
        }
        Ok(())
    }
}

/// Whether two different indices can address the same element. Sufficient test: sorted by
/// stride, each dimension's stride must step over everything the smaller ones span.
fn overlaps(shape: &[usize], strides: &[usize]) -> bool {
    if shape.contains(&0) {
        return false;
    }
    let mut axes: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(&extent, _)| extent > 1)
        .map(|(&extent, &stride)| (stride, extent))
        .collect();
    axes.sort_unstable();
    let mut span: usize = 0; // highest offset reachable with the smaller dimensions
    for (stride, extent) in axes {
        if stride <= span {
            return true;
        }
        span += stride * (extent - 1);
    }
    false
}

impl<K: Kind> Managed<K> {
    /// The elements as an array view (a guard that derefs to [`ArrayRef`]) with the tensor's
    /// exact layout (any strides, negative ones included; `byte_offset` honoured), for
    /// host-accessible memory of `T`'s dtype whose first element is aligned for `T`.
    ///
    /// Like [`Managed::as_slice`], it holds a shared borrow of every byte it addresses: refused
    /// with [`Error::AlreadyBorrowed`] while a mutable view of them exists anywhere.
    pub fn as_array<T: Element>(&self) -> Result<ReadArray<'_, T>, Error> {
        let (n, token) = self.borrowed_layout::<T>(false)?;
        // SAFETY: checked and borrowed (shared) by `strided_parts`; the memory lives until
        // `self` (borrowed by the guard) drops.
        let array = unsafe { n.view::<IxDyn>() };
        Ok(ReadArray {
            array,
            _borrow: token,
        })
    }

    /// The elements as a mutable array view (a guard that derefs to [`ArrayRef`]), with the
    /// tensor's exact layout, when the tensor is writable (no `READ_ONLY` flag),
    /// host-accessible, of `T`'s dtype, aligned for `T`, and no two indices address the same
    /// element. Refused with [`Error::AlreadyBorrowed`] while any other view of its bytes
    /// exists, through this owner or another.
    pub fn as_array_mut<T: Element>(&mut self) -> Result<WriteArray<'_, T>, Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let (n, token) = self.borrowed_layout::<T>(true)?;
        // SAFETY: as in `as_array`; in addition the producer allows writes (no READ_ONLY), the
        // borrow is exclusive (no two indices address the same element), `&mut self` keeps this
        // owner from handing out another view, and `n` makes no other one.
        let array = unsafe { n.view_mut::<IxDyn>() };
        Ok(WriteArray {
            array,
            _borrow: token,
        })
    }

    /// The layout of a view of `T`s, checked (for an exclusive view: no element addressed
    /// twice), then borrowed (with the owner's external checker), then (under the borrow)
    /// every element checked valid for `T`.
    pub(crate) fn borrowed_layout<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(Normalized<T>, BorrowToken), Error> {
        // SAFETY: validated at construction; the memory lives until the deleter runs, after
        // every view borrowing `self`.
        unsafe {
            strided_parts::<T>(
                self.data_ptr(),
                self.shape(),
                &self.strides(),
                self.dtype(),
                self.device(),
                exclusive,
                |token| self.with_external(token, exclusive),
            )
        }
    }
}

impl<K: Kind> Managed<K> {
    /// The checks and borrow of a raw pointer to the elements on any device ([`raw_parts`],
    /// with the owner's external checker).
    #[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
    pub(crate) fn raw_parts<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, BorrowToken), Error> {
        raw_parts::<T>(
            self.data_ptr(),
            self.shape(),
            &self.strides(),
            self.dtype(),
            exclusive,
            |token| self.with_external(token, exclusive),
        )
    }
}

/// A shared, borrow-registered view of a tensor as an ndarray array
/// ([`Managed::as_array`]). Derefs to [`ArrayRef`], so every ndarray method applies; views
/// made from it (`.view()`, iterators) borrow the guard and cannot outlive it.
pub struct ReadArray<'a, T> {
    array: ArrayViewD<'a, T>,
    _borrow: BorrowToken,
}

/// An exclusive, borrow-registered view of a tensor as an ndarray array
/// ([`Managed::as_array_mut`]). Derefs (mutably) to [`ArrayRef`].
pub struct WriteArray<'a, T> {
    array: ArrayViewMutD<'a, T>,
    _borrow: BorrowToken,
}

impl<T> Deref for ReadArray<'_, T> {
    type Target = ArrayRef<T, IxDyn>;
    fn deref(&self) -> &ArrayRef<T, IxDyn> {
        &self.array
    }
}

impl<T> Deref for WriteArray<'_, T> {
    type Target = ArrayRef<T, IxDyn>;
    fn deref(&self) -> &ArrayRef<T, IxDyn> {
        &self.array
    }
}

impl<T> DerefMut for WriteArray<'_, T> {
    fn deref_mut(&mut self) -> &mut ArrayRef<T, IxDyn> {
        &mut self.array
    }
}

impl<T: PartialEq, S: Data<Elem = T>> PartialEq<ArrayBase<S, IxDyn>> for ReadArray<'_, T> {
    fn eq(&self, other: &ArrayBase<S, IxDyn>) -> bool {
        self.array == *other
    }
}

impl<T: PartialEq, S: Data<Elem = T>> PartialEq<ArrayBase<S, IxDyn>> for WriteArray<'_, T> {
    fn eq(&self, other: &ArrayBase<S, IxDyn>) -> bool {
        self.array == *other
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for ReadArray<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.array.fmt(f)
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for WriteArray<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.array.fmt(f)
    }
}

#[path = "ndarray_export.rs"]
mod export;

#[cfg(test)]
#[path = "ndarray_tests.rs"]
mod tests;
