//! ndarray integration (feature `ndarray`): imported tensors as [`ArrayViewD`] /
//! [`ArrayViewMutD`], and [`Array`] / [`ArcArray`] exported without a copy.
//!
//! # Import
//!
//! [`TensorView::as_array`] (and the same method on [`ManagedTensor`],
//! [`ManagedTensorVersioned`] and, with feature `pyo3`, `PyTensor`) borrows the elements as an
//! `ArrayViewD<T>` with the producer's exact layout: any strides, negative ones included,
//! size-1 dimensions with odd strides, and the `byte_offset`. `as_array_mut` on the owning
//! types hands out an `ArrayViewMutD<T>` when the tensor is also writable (no `READ_ONLY`
//! flag) and no two indices address the same element. Either refuses, with a
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
//! [`Array<T, D>`] and [`ArcArray<T, D>`] implement [`IntoDLPack`]: the array itself becomes
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
//! `Array` and `ArcArray` are also [`Buffer`]s, so a `#[dlpack(data)]` field may be one. As a
//! buffer an array is flat storage: the elements from its lowest to its highest address
//! (for a non-contiguous array that includes the elements it skips). Give the struct
//! `shape` / `strides` fields for another layout; to export the array's own layout, use its
//! [`IntoDLPack`] implementation instead. An `ArcArray` field is always exported read-only,
//! because the struct's other methods could clone it while a consumer writes.

use alloc::vec::Vec;
use core::ffi::c_void;
use core::ptr::NonNull;

use ::ndarray::{
    ArcArray, Array, ArrayBase, ArrayViewD, ArrayViewMutD, Axis, Data, Dimension, IxDyn,
    ShapeBuilder,
};

use super::{
    cpu_device, Buffer, Element, Error, ManagedTensor, ManagedTensorVersioned, TensorInfo,
    TensorView,
};
use crate::IntoDLPack;

/// A tensor's layout rewritten for ndarray's constructors: every stride non-negative, the
/// pointer at the lowest addressed element, and the axes to invert afterwards.
struct Normalized<T> {
    ptr: *mut T,
    shape: Vec<usize>,
    strides: Vec<usize>,
    inverted: Vec<usize>,
}

impl<T> Normalized<T> {
    fn shape_and_strides(&self) -> ::ndarray::StrideShape<IxDyn> {
        IxDyn(&self.shape).strides(IxDyn(&self.strides))
    }
}

/// Checks that `T` may view `view`'s elements and rewrites its layout for ndarray.
fn normalize<T: Element>(view: &TensorView<'_>) -> Result<Normalized<T>, Error> {
    view.check_element::<T>()?;
    // Validated at construction: no negative extent.
    let shape: Vec<usize> = view.shape().iter().map(|&d| d as usize).collect();
    if view.numel() == 0 {
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
    let first = view.first_element::<T>()?;
    let mut ptr = first;
    let mut strides = Vec::with_capacity(shape.len());
    let mut inverted = Vec::new();
    for (axis, (&extent, &stride)) in shape.iter().zip(view.strides().iter()).enumerate() {
        if extent <= 1 {
            // Never stepped along: any stride is legal in DLPack, ndarray only needs one that
            // cannot overflow.
            strides.push(0);
            continue;
        }
        let step = isize::try_from(stride).map_err(|_| Error::Overflow)?;
        if step < 0 {
            // Validated at construction: `stride * (extent - 1)` elements stay within the
            // addressed range, which fits in `isize` bytes.
            ptr = ptr.wrapping_offset(step * (extent as isize - 1));
            inverted.push(axis);
        }
        strides.push(step.unsigned_abs());
    }
    let normalized = Normalized {
        ptr,
        shape,
        strides,
        inverted,
    };
    check_values::<T>(&normalized)?;
    Ok(normalized)
}

/// Calls [`Element::is_valid_bytes`] on every element (a no-op for types where every bit
/// pattern is valid, which the optimiser removes).
fn check_values<T: Element>(n: &Normalized<T>) -> Result<(), Error> {
    let size = core::mem::size_of::<T>();
    let mut index = alloc::vec![0usize; n.shape.len()];
    loop {
        let offset: usize = index.iter().zip(&n.strides).map(|(i, s)| i * s).sum();
        // SAFETY: a non-empty, validated tensor on host memory: every index within the shape
        // addresses `size` readable bytes of the producer's buffer (the normalised pointer is
        // the lowest addressed element, the strides step towards higher addresses).
        let bytes =
            unsafe { core::slice::from_raw_parts(n.ptr.wrapping_add(offset).cast::<u8>(), size) };
        if !T::is_valid_bytes(bytes) {
            return Err(Error::InvalidBool);
        }
        // Odometer increment, last axis fastest.
        let mut axis = n.shape.len();
        loop {
            if axis == 0 {
                return Ok(());
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < n.shape[axis] {
                break;
            }
            index[axis] = 0;
        }
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

impl<'a> TensorView<'a> {
    /// The elements as an [`ArrayViewD`] with the tensor's exact layout (any strides, negative
    /// ones included; `byte_offset` honoured), for host-accessible memory of `T`'s dtype whose
    /// first element is aligned for `T`.
    ///
    /// As with [`TensorView::as_slice`], the producer may still write to the memory while the
    /// view is held.
    pub fn as_array<T: Element>(&self) -> Result<ArrayViewD<'a, T>, Error> {
        let n = normalize::<T>(self)?;
        // SAFETY: `normalize` checked dtype, host access, non-NULL and alignment; the tensor was
        // validated at construction, so every element the non-negative strides reach from the
        // lowest addressed element lies in the producer's buffer, within `isize` bytes, and
        // that buffer lives until the owner (borrowed for 'a) calls the deleter.
        let mut array = unsafe { ArrayViewD::from_shape_ptr(n.shape_and_strides(), n.ptr) };
        for &axis in &n.inverted {
            array.invert_axis(Axis(axis));
        }
        Ok(array)
    }

    /// # Safety
    ///
    /// No other reference to the elements may be used while the returned view lives (the
    /// caller holds the owner of the tensor mutably for `'a`).
    unsafe fn as_array_mut_unchecked<T: Element>(self) -> Result<ArrayViewMutD<'a, T>, Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let n = normalize::<T>(&self)?;
        if overlaps(&n.shape, &n.strides) {
            return Err(Error::Overlapping);
        }
        // SAFETY: as in `as_array`; in addition the producer allows writes (no READ_ONLY), no
        // two indices address the same element (checked above), and the caller guarantees
        // that nothing else accesses the elements through this owner for 'a.
        let mut array = unsafe { ArrayViewMutD::from_shape_ptr(n.shape_and_strides(), n.ptr) };
        for &axis in &n.inverted {
            array.invert_axis(Axis(axis));
        }
        Ok(array)
    }
}

macro_rules! owner_views {
    ($($owner:ty),*) => {$(
        impl $owner {
            /// The elements as an [`ArrayViewD`]: see [`TensorView::as_array`].
            pub fn as_array<T: Element>(&self) -> Result<ArrayViewD<'_, T>, Error> {
                self.view().as_array()
            }

            /// The elements as an [`ArrayViewMutD`], with the tensor's exact layout, when the
            /// tensor is writable (no `READ_ONLY` flag), host-accessible, of `T`'s dtype,
            /// aligned for `T`, and no two indices address the same element.
            pub fn as_array_mut<T: Element>(&mut self) -> Result<ArrayViewMutD<'_, T>, Error> {
                let view = (&*self).view();
                // SAFETY: `&mut self` is held for the view's lifetime, so this owner hands out
                // no other view of the elements meanwhile.
                unsafe { view.as_array_mut_unchecked() }
            }
        }
    )*};
}

owner_views!(ManagedTensor, ManagedTensorVersioned);
#[cfg(feature = "pyo3")]
owner_views!(crate::pyo3_glue::PyTensor);

/// The lowest addressed element of an array and the number of elements up to its highest
/// one (the whole span, gaps included).
fn span<A, S: Data<Elem = A>, D: Dimension>(array: &ArrayBase<S, D>) -> (*mut A, usize) {
    if array.is_empty() {
        return (array.as_ptr().cast_mut(), 0);
    }
    let mut low: isize = 0;
    let mut high: isize = 0;
    for (&extent, &stride) in array.shape().iter().zip(array.strides()) {
        // ndarray guarantees that every element is within `isize` of the first.
        let reach = stride * (extent as isize - 1);
        if reach < 0 {
            low += reach;
        } else {
            high += reach;
        }
    }
    (
        array.as_ptr().cast_mut().wrapping_offset(low),
        (high - low) as usize + 1,
    )
}

fn array_info<A: Element, S: Data<Elem = A>, D: Dimension>(array: &ArrayBase<S, D>) -> TensorInfo {
    TensorInfo::strided(
        array.as_ptr().cast_mut().cast::<c_void>(),
        cpu_device(),
        A::DTYPE,
        array.shape().iter().map(|&d| d as i64).collect(),
        array.strides().iter().map(|&s| s as i64).collect(),
    )
}

/// Exports the array with its own shape and strides; the array is the keepalive.
impl<A: Element, D: Dimension> IntoDLPack for Array<A, D> {
    fn tensor_info(&self) -> TensorInfo {
        array_info(self)
    }
}

/// Exports the array with its own shape and strides; read-only unless this `ArcArray` is the
/// only owner of its data.
impl<A: Element, D: Dimension> IntoDLPack for ArcArray<A, D> {
    fn tensor_info(&self) -> TensorInfo {
        array_info(self)
    }

    fn is_read_only(&self) -> bool {
        !self.is_unique()
    }
}

// SAFETY: an `Array` owns its elements in one heap allocation (a Vec) that moving the array
// does not move; every element between the lowest and the highest one the array addresses is
// an initialised element of that allocation. The pointer comes from the array's raw data
// pointer, not from a reference, and the array owns the data uniquely, so consumer writes are
// writes to memory nothing else relies on.
unsafe impl<A: Element, D: Dimension> Buffer for Array<A, D> {
    type Elem = A;
    fn data_ptr(&self) -> *mut A {
        span(self).0
    }
    fn num_elements(&self) -> usize {
        span(self).1
    }
}

// SAFETY: as for `Array`: the elements live in one shared heap allocation that no clone
// moves. Exported read-only: the owner of the field could clone the array at any time.
unsafe impl<A: Element, D: Dimension> Buffer for ArcArray<A, D> {
    type Elem = A;
    fn data_ptr(&self) -> *mut A {
        span(self).0
    }
    fn num_elements(&self) -> usize {
        span(self).1
    }
    fn is_writable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::{DLDeviceType, DLPACK_FLAG_BITMASK_READ_ONLY};
    use crate::safe::{cuda_device, pack_versioned, Export};
    use ::ndarray::{arr2, s, Array1, Array2, Array3, ArrayD};

    fn iota(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    #[test]
    fn contiguous_view_matches_slice() {
        let t = Export::new(iota(6)).shape(&[2, 3]).versioned().unwrap();
        let a = t.as_array::<f32>().unwrap();
        assert_eq!(a, arr2(&[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]).into_dyn());
        assert_eq!(a.as_ptr().cast::<c_void>(), t.data_ptr().cast_const());
    }

    #[test]
    fn negative_strides_view_reversed_data() {
        // Shape [2, 3], strides [-3, -1]: starts at the last element and walks backwards.
        let info = TensorInfo::strided(
            core::ptr::null_mut(),
            cpu_device(),
            f32::DTYPE,
            vec![2, 3],
            vec![-3, -1],
        );
        let mut data = iota(6);
        let last = data.as_mut_ptr().wrapping_add(5).cast::<c_void>();
        let raw = pack_versioned(data, TensorInfo { data: last, ..info }, 0);
        // SAFETY: a fresh, valid export of ours.
        let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
        let a = t.as_array::<f32>().unwrap();
        assert_eq!(a, arr2(&[[5.0, 4.0, 3.0], [2.0, 1.0, 0.0]]).into_dyn());
        assert_eq!(a.strides(), &[-3, -1]);
        assert_eq!(a.as_ptr().cast::<c_void>(), last.cast_const());
    }

    #[test]
    fn size_one_dims_with_odd_strides_and_byte_offset() {
        // 1x3 window starting at element 2 (byte_offset 8), first stride absurd but legal.
        let mut data = iota(8);
        let ptr = data.as_mut_ptr().cast::<c_void>();
        let info = TensorInfo::strided(ptr, cpu_device(), f32::DTYPE, vec![1, 3], vec![1 << 40, 2])
            .with_byte_offset(8);
        let raw = pack_versioned(data, info, 0);
        // SAFETY: a fresh, valid export of ours.
        let mut t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
        assert_eq!(
            t.as_array::<f32>().unwrap(),
            arr2(&[[2.0, 4.0, 6.0]]).into_dyn()
        );
        let mut m = t.as_array_mut::<f32>().unwrap();
        m[[0, 1]] = -1.0;
        drop(m);
        assert_eq!(t.as_array::<f32>().unwrap()[[0, 1]], -1.0);
    }

    #[test]
    fn mutable_view_writes_through_negative_and_transposed_strides() {
        let a = Array2::from_shape_vec((3, 4), iota(12)).unwrap();
        let flipped = a.slice_move(s![..;-1, ..;2]).reversed_axes(); // 2x3, strides [2, -4]
        let mut t = flipped.into_managed_tensor_versioned().unwrap();
        assert_eq!(&*t.strides(), &[2, -4]);
        {
            let mut m = t.as_array_mut::<f32>().unwrap();
            assert_eq!(m.shape(), &[2, 3]);
            assert_eq!(m[[0, 0]], 8.0);
            assert_eq!(m[[1, 2]], 2.0);
            m[[1, 2]] = 100.0;
        }
        // The write landed on element 2 of the original buffer, seen through the raw pointer.
        let first = t.data_ptr().cast::<f32>();
        // SAFETY: element (1, 2) is at offset 1*2 + 2*(-4) = -6 from the first element, inside
        // the exported buffer, which `t` keeps alive.
        assert_eq!(unsafe { *first.offset(-6) }, 100.0);
    }

    #[test]
    fn refusals() {
        let t = Export::new(iota(4)).versioned().unwrap();
        assert!(matches!(
            t.as_array::<f64>(),
            Err(Error::DtypeMismatch { .. })
        ));
        let mut ro = Export::new(iota(4)).read_only().versioned().unwrap();
        assert!(ro.as_array::<f32>().is_ok());
        assert_eq!(ro.as_array_mut::<f32>().unwrap_err(), Error::ReadOnly);

        // Misaligned: a u8 buffer viewed as u16 from an odd byte offset.
        let mut bytes = vec![0u16; 4];
        let ptr = bytes.as_mut_ptr().cast::<c_void>();
        let info =
            TensorInfo::contiguous(ptr, cpu_device(), u16::DTYPE, vec![2]).with_byte_offset(1);
        let raw = pack_versioned(bytes, info, 0);
        // SAFETY: a fresh, valid export of ours.
        let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
        assert!(matches!(
            t.as_array::<u16>(),
            Err(Error::Misaligned { align: 2, .. })
        ));

        // Device memory: described only, never dereferenced.
        let info =
            TensorInfo::contiguous(0x1000 as *mut c_void, cuda_device(0), f32::DTYPE, vec![4]);
        let raw = pack_versioned((), info, 0);
        // SAFETY: a fresh, valid export of ours (the CUDA pointer is never read).
        let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
        assert_eq!(t.device().device_type, DLDeviceType::CUDA);
        assert!(matches!(
            t.as_array::<f32>(),
            Err(Error::NotHostAccessible(_))
        ));
    }

    #[test]
    fn broadcast_strides_are_readable_but_not_writable() {
        let mut t = Export::new(iota(3))
            .shape(&[4, 3])
            .strides(&[0, 1])
            .versioned()
            .unwrap();
        let a = t.as_array::<f32>().unwrap();
        assert_eq!(
            a.index_axis(Axis(0), 3).iter().copied().collect::<Vec<_>>(),
            vec![0.0, 1.0, 2.0]
        );
        assert_eq!(t.as_array_mut::<f32>().unwrap_err(), Error::Overlapping);
        // Interleaved dimensions overlap too: offsets i*2 + j for j < 3.
        let mut t = Export::new(iota(8))
            .shape(&[3, 3])
            .strides(&[2, 1])
            .versioned()
            .unwrap();
        assert_eq!(t.as_array_mut::<f32>().unwrap_err(), Error::Overlapping);
    }

    #[test]
    fn bool_views_are_validated() {
        let mut data = vec![1u8, 0, 2, 1];
        let ptr = data.as_mut_ptr().cast::<c_void>();
        let info = TensorInfo::strided(ptr, cpu_device(), bool::DTYPE, vec![2], vec![3]);
        let raw = pack_versioned(data, info, 0);
        // SAFETY: a fresh, valid export of ours.
        let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
        // Elements 0 and 3 are valid bools; the 2 in between is skipped by the stride.
        assert_eq!(
            t.as_array::<bool>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![true, true]
        );
        let t = Export::new(vec![0u8, 2]).versioned().unwrap();
        // Not a bool tensor at all: refused by dtype first.
        assert!(matches!(
            t.as_array::<bool>(),
            Err(Error::DtypeMismatch { .. })
        ));
        let mut data = vec![0u8, 2];
        let ptr = data.as_mut_ptr().cast::<c_void>();
        let info = TensorInfo::contiguous(ptr, cpu_device(), bool::DTYPE, vec![2]);
        let raw = pack_versioned(data, info, 0);
        // SAFETY: a fresh, valid export of ours.
        let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
        assert_eq!(t.as_array::<bool>().unwrap_err(), Error::InvalidBool);
    }

    #[test]
    fn empty_and_zero_dim() {
        let t = Export::new(Vec::<f64>::new())
            .shape(&[0, 5])
            .versioned()
            .unwrap();
        let a = t.as_array::<f64>().unwrap();
        assert_eq!(a.shape(), &[0, 5]);
        // An empty tensor whose other extents multiply past isize::MAX: refused, not UB.
        let info = TensorInfo::contiguous(
            core::ptr::null_mut(),
            cpu_device(),
            f64::DTYPE,
            vec![0, 1 << 40, 1 << 40],
        );
        // Either the export refuses it or the view does; neither may build the array.
        match crate::safe::try_pack_versioned((), info, 0) {
            Ok(raw) => {
                // SAFETY: a fresh, valid export of ours.
                let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
                assert_eq!(t.as_array::<f64>().unwrap_err(), Error::Overflow);
            }
            Err(e) => assert_eq!(e, Error::Overflow),
        }
        let t = Export::new(vec![7i32])
            .shape::<i64>(&[])
            .versioned()
            .unwrap();
        let a = t.as_array::<i32>().unwrap();
        assert_eq!(a.ndim(), 0);
        assert_eq!(a[IxDyn(&[])], 7);
    }

    #[test]
    fn legacy_tensor_views() {
        let mut t = Export::new(iota(4)).shape(&[2, 2]).legacy().unwrap();
        t.as_array_mut::<f32>().unwrap()[[1, 1]] = 9.0;
        assert_eq!(t.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 9.0]);
    }

    #[test]
    fn array_export_is_zero_copy_and_keeps_the_array_alive() {
        let a = Array3::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as i64);
        let ptr = a.as_ptr();
        let t = a.into_managed_tensor().unwrap();
        assert_eq!(t.data_ptr().cast_const().cast::<i64>(), ptr);
        assert_eq!(t.shape(), &[2, 3, 4]);
        assert_eq!(&*t.strides(), &[12, 4, 1]);
        assert_eq!(t.as_array::<i64>().unwrap()[[1, 2, 3]], 123);

        // Fortran order and a sliced, negative-strided array keep their layout.
        let f = Array2::from_shape_vec((2, 3).f(), iota(6)).unwrap();
        let t = f.into_managed_tensor_versioned().unwrap();
        assert_eq!(&*t.strides(), &[1, 2]);
        assert!(!t.is_contiguous());
        assert_eq!(
            t.as_array::<f32>().unwrap(),
            arr2(&[[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]).into_dyn()
        );
        let r = Array1::from(iota(5)).slice_move(s![..;-2]);
        let t = r.into_managed_tensor_versioned().unwrap();
        assert_eq!(&*t.strides(), &[-2]);
        assert_eq!(
            t.as_array::<f32>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![4.0, 2.0, 0.0]
        );
    }

    #[test]
    fn arc_array_is_read_only_while_shared() {
        let a: ArcArray<f32, _> = Array2::from_shape_vec((2, 2), iota(4))
            .unwrap()
            .into_shared();
        let other = a.clone();
        let mut t = a.into_managed_tensor_versioned().unwrap();
        assert_eq!(
            t.flags() & DLPACK_FLAG_BITMASK_READ_ONLY,
            DLPACK_FLAG_BITMASK_READ_ONLY
        );
        assert_eq!(t.as_array_mut::<f32>().unwrap_err(), Error::ReadOnly);
        assert_eq!(t.as_array::<f32>().unwrap(), other.view().into_dyn());
        drop(t);
        assert!(other.is_unique());
        let unique = other.into_managed_tensor().unwrap(); // legacy needs writable data
        assert_eq!(unique.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0]);
        let shared: ArcArray<f32, _> = ArcArray::from_vec(iota(2));
        let _keep = shared.clone();
        assert_eq!(shared.into_managed_tensor().unwrap_err(), Error::ReadOnly);
    }

    #[test]
    fn arrays_as_buffers_span_their_elements() {
        let a = Array2::from_shape_vec((3, 4), iota(12)).unwrap();
        assert_eq!(Buffer::num_elements(&a), 12);
        assert_eq!(Buffer::data_ptr(&a).cast_const(), a.as_ptr());
        // Columns 3, 1 of rows 2, 0: lowest element 1, highest 11.
        let v = a.slice_move(s![..;-2, ..;-2]);
        assert_eq!(Buffer::num_elements(&v), 11);
        // SAFETY: index 0 of the span is element 1 of the original buffer.
        assert_eq!(unsafe { *Buffer::data_ptr(&v) }, 1.0);
        let t = Export::new(v).versioned().unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &iota(12)[1..]);
        let arc: ArcArray<u8, _> = ArcArray::from_vec(vec![1, 2, 3]);
        assert!(!Buffer::is_writable(&arc));
        let empty = ArrayD::<f32>::zeros(IxDyn(&[2, 0]));
        assert_eq!(Buffer::num_elements(&empty), 0);
    }
}
