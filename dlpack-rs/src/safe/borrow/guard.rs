//! Views that hold a registry borrow while they live.

use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

use crate::safe::borrow::BorrowToken;

/// A shared view `V` of a tensor's elements (`&'a [T]`, ndarray's `ArrayViewD`), derefs to what
/// `V` derefs to; while it lives, no mutable view of its bytes can be taken.
pub struct ReadGuard<'a, V> {
    pub(crate) view: V,
    _borrow: BorrowToken,
    _life: PhantomData<&'a ()>,
}

/// An exclusive view `V` of a tensor's elements (`&'a mut [T]`, ndarray's `ArrayViewMutD`),
/// derefs mutably to what `V` derefs to; while it lives, no other view of its bytes can be taken.
pub struct WriteGuard<'a, V> {
    pub(crate) view: V,
    _borrow: BorrowToken,
    _life: PhantomData<&'a ()>,
}

impl<V> ReadGuard<'_, V> {
    /// `view` under `borrow`, a shared registry borrow of its bytes that ends with the guard
    /// (foreign writers are excluded by the export rules: read-only flags).
    pub(crate) fn new(view: V, borrow: BorrowToken) -> Self {
        ReadGuard {
            view,
            _borrow: borrow,
            _life: PhantomData,
        }
    }
}

impl<V> WriteGuard<'_, V> {
    /// `view` under `borrow`, an exclusive registry borrow of its bytes that ends with the guard.
    pub(crate) fn new(view: V, borrow: BorrowToken) -> Self {
        WriteGuard {
            view,
            _borrow: borrow,
            _life: PhantomData,
        }
    }
}

impl<V: Deref> Deref for ReadGuard<'_, V> {
    type Target = V::Target;
    fn deref(&self) -> &V::Target {
        &self.view
    }
}

impl<V: Deref> Deref for WriteGuard<'_, V> {
    type Target = V::Target;
    fn deref(&self) -> &V::Target {
        &self.view
    }
}

impl<V: DerefMut> DerefMut for WriteGuard<'_, V> {
    fn deref_mut(&mut self) -> &mut V::Target {
        &mut self.view
    }
}

impl<V: fmt::Debug> fmt::Debug for ReadGuard<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view.fmt(f)
    }
}

impl<V: fmt::Debug> fmt::Debug for WriteGuard<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view.fmt(f)
    }
}

macro_rules! slice_like {
    ($guard:ident, $view:ty) => {
        impl<'a, T> AsRef<[T]> for $guard<'a, $view> {
            fn as_ref(&self) -> &[T] {
                self
            }
        }
        impl<'a, T: PartialEq> PartialEq for $guard<'a, $view> {
            fn eq(&self, other: &Self) -> bool {
                **self == **other
            }
        }
        impl<'a, T: PartialEq> PartialEq<[T]> for $guard<'a, $view> {
            fn eq(&self, other: &[T]) -> bool {
                **self == *other
            }
        }
        impl<'a, T: PartialEq> PartialEq<&[T]> for $guard<'a, $view> {
            fn eq(&self, other: &&[T]) -> bool {
                **self == **other
            }
        }
        impl<'a, T: PartialEq, const N: usize> PartialEq<[T; N]> for $guard<'a, $view> {
            fn eq(&self, other: &[T; N]) -> bool {
                **self == other[..]
            }
        }
        impl<'a, T: PartialEq, const N: usize> PartialEq<&[T; N]> for $guard<'a, $view> {
            fn eq(&self, other: &&[T; N]) -> bool {
                **self == other[..]
            }
        }
        impl<'a, T: PartialEq> PartialEq<alloc::vec::Vec<T>> for $guard<'a, $view> {
            fn eq(&self, other: &alloc::vec::Vec<T>) -> bool {
                **self == other[..]
            }
        }
        impl<'a, 'b, T> IntoIterator for &'b $guard<'a, $view> {
            type Item = &'b T;
            type IntoIter = core::slice::Iter<'b, T>;
            fn into_iter(self) -> Self::IntoIter {
                self.iter()
            }
        }
    };
}
slice_like!(ReadGuard, &'a [T]);
slice_like!(WriteGuard, &'a mut [T]);

impl<'a, 'b, T> IntoIterator for &'b mut WriteGuard<'a, &'a mut [T]> {
    type Item = &'b mut T;
    type IntoIter = core::slice::IterMut<'b, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}
