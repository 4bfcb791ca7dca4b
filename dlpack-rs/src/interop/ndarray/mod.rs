//! ndarray (feature `ndarray`): imports viewed as [`ArrayViewD`] / [`ArrayViewMutD`]
//! ([`Managed::as_array`]); [`Array`] / [`ArcArray`] exported without a copy (`export.rs`).

mod export;

#[cfg(doc)]
use ::ndarray::{ArcArray, Array};
use ::ndarray::{
    ArrayBase, ArrayView, ArrayViewD, ArrayViewMut, ArrayViewMutD, Axis, Data, Dimension, IxDyn,
    ShapeBuilder,
};

use crate::safe::import::strided::Normalized;
use crate::safe::{Element, Error, Kind, Managed, ReadGuard, WriteGuard};

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
    /// The layout came from `Parts::strided`, its memory alive and borrowed for `'a`; `D` has
    /// as many dimensions as the layout (any, for `IxDyn`).
    pub(crate) unsafe fn view<'a, D: Dimension>(&self) -> ArrayView<'a, T, D> {
        // SAFETY: this function's contract: non-negative strides from the lowest element stay
        // in the producer's validated buffer, alive and borrowed for 'a.
        let mut array = unsafe { ArrayView::from_shape_ptr(self.dims::<D>(), self.ptr) };
        for &axis in &self.inverted {
            array.invert_axis(Axis(axis));
        }
        array
    }

    /// The mutable array view this layout describes.
    ///
    /// # Safety
    /// As [`Normalized::view`], borrowed exclusively from writable memory (no two indices
    /// alias), and no other view made from this layout is alive during `'a`.
    pub(crate) unsafe fn view_mut<'a, D: Dimension>(&self) -> ArrayViewMut<'a, T, D> {
        // SAFETY: as in `view`; exclusive and writable by this function's contract.
        let mut array = unsafe { ArrayViewMut::from_shape_ptr(self.dims::<D>(), self.ptr) };
        for &axis in &self.inverted {
            array.invert_axis(Axis(axis));
        }
        array
    }
}

impl<K: Kind> Managed<K> {
    /// The elements as an array view with the tensor's exact layout (negative strides too),
    /// borrowed as [`Managed::as_slice`] is but needing no contiguity.
    ///
    /// ```
    /// use dlpack_rs::safe::Export;
    ///
    /// // A 2x3 tensor seen transposed: ndarray gets the same layout.
    /// let t = Export::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
    ///     .shape(&[3, 2])
    ///     .strides(&[1, 3])
    ///     .versioned()?;
    /// let a = t.as_array::<f32>()?;
    /// assert_eq!(a.shape(), &[3, 2]);
    /// assert_eq!(a[[0, 1]], 4.0);
    /// assert_eq!(a.strides(), &[1, 3]);
    /// # Ok::<(), dlpack_rs::safe::Error>(())
    /// ```
    pub fn as_array<T: Element>(&self) -> Result<ReadGuard<'_, ArrayViewD<'_, T>>, Error> {
        let (n, token) = self.borrowed_layout::<T>(false)?;
        // SAFETY: checked and borrowed (shared) by `Parts::strided`; alive while `self` is.
        let array = unsafe { n.view::<IxDyn>() };
        Ok(ReadGuard::new(array, token))
    }

    /// The elements as a mutable array view: as [`Managed::as_array`], refused also for a
    /// read-only tensor, aliasing indices, and while any other view of its bytes exists.
    pub fn as_array_mut<T: Element>(
        &mut self,
    ) -> Result<WriteGuard<'_, ArrayViewMutD<'_, T>>, Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let (n, token) = self.borrowed_layout::<T>(true)?;
        // SAFETY: as in `as_array`; writable, borrowed exclusively (no aliasing indices), and
        // `&mut self` keeps this owner from handing out another view.
        let array = unsafe { n.view_mut::<IxDyn>() };
        Ok(WriteGuard::new(array, token))
    }
}

impl<T: PartialEq, S: Data<Elem = T>> PartialEq<ArrayBase<S, IxDyn>>
    for ReadGuard<'_, ArrayViewD<'_, T>>
{
    fn eq(&self, other: &ArrayBase<S, IxDyn>) -> bool {
        self.view == *other
    }
}

impl<T: PartialEq, S: Data<Elem = T>> PartialEq<ArrayBase<S, IxDyn>>
    for WriteGuard<'_, ArrayViewMutD<'_, T>>
{
    fn eq(&self, other: &ArrayBase<S, IxDyn>) -> bool {
        self.view == *other
    }
}
