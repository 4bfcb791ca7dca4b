//! `Array` and `ArcArray` as export buffers (feature `ndarray`): the span of elements an
//! array's layout reaches, which its `Buffer` implementation hands over whole.

use ::ndarray::{ArcArray, Array, ArrayBase, Data, Dimension};

use crate::safe::{Buffer, Element, SharedBuffer};

/// The lowest addressed element of an array and the number of elements up to its highest
/// one (the whole span, gaps included).
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

// SAFETY: an `Array` owns its elements in one heap allocation (a Vec) that moving the array
// does not move; every element between the lowest and the highest one the array addresses is
// an initialised element of that allocation. The pointer comes from the array's raw data
// pointer, not from a reference, and the array owns the data uniquely, so consumer writes are
// writes to memory nothing else relies on.
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

// SAFETY: a clone of an `ArcArray` shares its allocation, pointer, dimensions and strides, and
// keeps the allocation alive; every mutable access of ndarray's shared arrays first makes the
// data unique (copy-on-write), so no owner writes the elements while another owner exists.
unsafe impl<A: Element, D: Dimension + 'static> SharedBuffer for ArcArray<A, D> {}
