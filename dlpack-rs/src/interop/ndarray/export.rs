//! `Array` and `ArcArray` as export buffers: the whole span of elements the layout reaches.

use ::ndarray::{ArcArray, Array, ArrayBase, Data, Dimension};

use crate::safe::{Buffer, Element, SharedBuffer};

/// An array's lowest addressed element and the count up to its highest one, gaps included.
pub(crate) fn span<A, S: Data<Elem = A>, D: Dimension>(array: &ArrayBase<S, D>) -> (*mut A, usize) {
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

/// An `Array` or `ArcArray` as export memory (a `#[dlpack(data)]` field): the span from its lowest
/// to its highest element, gaps included, nothing copied; [`IntoDLPack`](crate::IntoDLPack) keeps
/// the layout. An `ArcArray` is writable only alone ([`ArcArray::is_unique`]), never as a field.
///
/// ```
/// use dlpack_rs::IntoDLPack;
/// use ndarray::{s, Array2};
///
/// let a = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as u16);
/// let reversed = a.slice_move(s![.., ..;-2]); // every other column, right to left
/// let t = reversed.into_managed_tensor_versioned()?;
/// assert_eq!(t.shape(), &[3, 2]);
/// assert_eq!(&*t.strides(), &[4, -2]);
/// assert_eq!(t.as_array::<u16>()?[[1, 0]], 7);
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
// SAFETY: an `Array` owns its elements uniquely in one heap allocation that does not move with
// it, every element of the span initialised; the pointer is the raw data pointer.
unsafe impl<A: Element, D: Dimension> Buffer for Array<A, D> {
    type Elem = A;
    const SHARED_PTR_WRITABLE: bool = true;
    fn data_ptr(&self) -> *mut A {
        span(self).0
    }
    fn num_elements(&self) -> usize {
        span(self).1
    }
}

// SAFETY: as for `Array`, in a shared allocation no clone moves. Read-only: the field's owner
// could clone the array at any time.
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

// SAFETY: a clone shares the allocation, pointer and layout and keeps it alive; ndarray's
// copy-on-write keeps any owner from writing while another exists.
unsafe impl<A: Element, D: Dimension + 'static> SharedBuffer for ArcArray<A, D> {}
