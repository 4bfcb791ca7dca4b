//! Views that hold a registry borrow while they live.

use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

use crate::safe::borrow::BorrowToken;

/// A guard type: a view `V` of a tensor's elements under a registry borrow that ends with it,
/// dereferencing to what `V` dereferences to.
macro_rules! guard {
    ($(#[$doc:meta])* $guard:ident) => {
        $(#[$doc])*
        pub struct $guard<'a, V> {
            pub(crate) view: V,
            _borrow: BorrowToken,
            _life: PhantomData<&'a ()>,
        }

        impl<V> $guard<'_, V> {
            /// `view` under `borrow`, a registry borrow of its bytes that ends with the guard.
            pub(crate) fn new(view: V, borrow: BorrowToken) -> Self {
                $guard {
                    view,
                    _borrow: borrow,
                    _life: PhantomData,
                }
            }
        }

        impl<V: Deref> Deref for $guard<'_, V> {
            type Target = V::Target;
            fn deref(&self) -> &V::Target {
                &self.view
            }
        }

        impl<V: fmt::Debug> fmt::Debug for $guard<'_, V> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.view.fmt(f)
            }
        }
    };
}

guard!(
    /// A shared view `V` of a tensor's elements (`&'a [T]`, ndarray's `ArrayViewD`), derefs to
    /// what `V` derefs to; while it lives, no mutable view of its bytes can be taken.
    ReadGuard
);
guard!(
    /// An exclusive view `V` of a tensor's elements (`&'a mut [T]`, ndarray's `ArrayViewMutD`),
    /// derefs mutably to what `V` derefs to; while it lives, no other view of its bytes can be
    /// taken.
    WriteGuard
);

impl<V: DerefMut> DerefMut for WriteGuard<'_, V> {
    fn deref_mut(&mut self) -> &mut V::Target {
        &mut self.view
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
