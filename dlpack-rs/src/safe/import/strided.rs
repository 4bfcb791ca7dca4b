//! Views of any layout: [`Parts::strided`], [`Parts::raw`], their layouts and overlap test.

use alloc::vec::Vec;
use core::ptr::NonNull;

use crate::safe::borrow::BorrowToken;
use crate::safe::import::views::{
    addressed_token, dtype_is, first_of, host_viewable, take_external, Parts,
};
use crate::safe::{Element, Error, Kind, Managed};

/// A layout as ndarray takes it: non-negative strides from the lowest element, axes to invert.
pub(crate) struct Normalized<T> {
    pub(crate) ptr: *mut T,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    pub(crate) inverted: Vec<usize>,
}

impl<T> Normalized<T> {
    /// The number of elements when they are one C-contiguous run, else `None`.
    #[allow(dead_code)] // used by the pyo3 layer
    pub(crate) fn contiguous_len(&self) -> Option<usize> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        if !self.inverted.is_empty() {
            return None;
        }
        let mut expected = 1usize;
        for (&extent, &stride) in self.shape.iter().zip(&self.strides).rev() {
            if extent > 1 && stride != expected {
                return None;
            }
            expected *= extent;
        }
        Some(expected)
    }

    /// The address of the element at `index`, or `None` outside the shape.
    #[allow(dead_code)] // used by the pyo3 layer
    pub(crate) fn element(&self, index: &[usize]) -> Option<*mut T> {
        if index.len() != self.shape.len() || index.iter().zip(&self.shape).any(|(&i, &d)| i >= d) {
            return None;
        }
        let offset: usize = index
            .iter()
            .enumerate()
            .map(|(axis, &i)| {
                let i = if self.inverted.contains(&axis) {
                    self.shape[axis] - 1 - i
                } else {
                    i
                };
                i * self.strides[axis]
            })
            .sum();
        Some(self.ptr.wrapping_add(offset))
    }

    /// The address of the element at index 0 of every axis.
    #[allow(dead_code)] // used by the pyo3 layer
    pub(crate) fn first(&self) -> *mut T {
        self.inverted.iter().fold(self.ptr, |p, &axis| {
            p.wrapping_add((self.shape[axis].saturating_sub(1)) * self.strides[axis])
        })
    }
}

/// Checks that an empty shape's non-zero extents multiply within `isize`, as ndarray needs
/// (DLPack allows `(0, 2^62, 2^62)`).
pub(crate) fn viewable_empty(shape: &[usize]) -> Result<(), Error> {
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
        .map(drop)
        .ok_or(Error::Overflow)
}

/// Checks that `T` may view a tensor's elements and rewrites its layout (see [`Normalized`]).
fn normalize<T: Element>(p: &Parts<'_>, strides: &[i64]) -> Result<Normalized<T>, Error> {
    dtype_is::<T>(p.dtype)?;
    host_viewable(p.device)?;
    // Validated: no negative extent.
    let shape: Vec<usize> = p.shape.iter().map(|&d| d as usize).collect();
    if shape.contains(&0) {
        viewable_empty(&shape)?;
        let strides = shape.iter().map(|_| 0).collect();
        return Ok(Normalized {
            ptr: NonNull::<T>::dangling().as_ptr(),
            shape,
            strides,
            inverted: Vec::new(),
        });
    }
    let mut ptr = first_of::<T>(p.first)?;
    let mut out = Vec::with_capacity(shape.len());
    let mut inverted = Vec::new();
    for (axis, (&extent, &stride)) in shape.iter().zip(strides.iter()).enumerate() {
        if extent <= 1 {
            // Never stepped along: any stride is legal, ndarray needs one that cannot overflow.
            out.push(0);
            continue;
        }
        let step = isize::try_from(stride).map_err(|_| Error::Overflow)?;
        if step < 0 {
            // Validated: the addressed range fits in `isize` bytes.
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

impl Parts<'_> {
    /// Checks and borrows a view of `T` with any strides (exclusive: no element addressed twice).
    ///
    /// # Safety
    /// As [`Parts::slice`], for a view made from the returned layout.
    pub(crate) unsafe fn strided<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(Normalized<T>, BorrowToken), Error> {
        let (first, shape, strides) = (self.first, self.shape, self.strides());
        let n = normalize::<T>(self, &strides)?;
        if exclusive && overlaps(&n.shape, &n.strides) {
            return Err(Error::Overlapping);
        }
        let token = addressed_token(first, shape, &strides, self.dtype, exclusive)?;
        // SAFETY: the context lives while the token does (this function's contract); the token
        // was just taken with `exclusive`.
        let token = unsafe { take_external(self.external, token, exclusive) }?;
        check_values::<T>(&n)?;
        Ok((n, token))
    }

    /// Checks and borrows a raw pointer to the elements on any device, reading nothing (device
    /// addresses are registered as host ones: a collision can only refuse a view).
    ///
    /// # Safety
    /// The external context lives while the returned token does.
    #[allow(dead_code)] // used by the pyo3 layer
    pub(crate) unsafe fn raw<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(*mut T, BorrowToken), Error> {
        let (shape, strides) = (self.shape, self.strides());
        dtype_is::<T>(self.dtype)?;
        let mut first = self.first.cast::<T>();
        if !shape.contains(&0) {
            first = first_of::<T>(first.cast())?;
            let abs = |v: &[i64]| -> Vec<usize> {
                v.iter().map(|&d| d.unsigned_abs() as usize).collect()
            };
            if exclusive && overlaps(&abs(shape), &abs(&strides)) {
                return Err(Error::Overlapping);
            }
        }
        let token = addressed_token(first.cast(), shape, &strides, self.dtype, exclusive)?;
        // SAFETY: this function's contract; the token was just taken with `exclusive`.
        Ok((first, unsafe {
            take_external(self.external, token, exclusive)
        }?))
    }
}

/// Checks [`Element::is_valid_bytes`] of every element the layout reaches (unless any is valid).
fn check_values<T: Element>(n: &Normalized<T>) -> Result<(), Error> {
    if T::ANY_BIT_PATTERN {
        return Ok(());
    }
    for_each_reached(&n.shape, &n.strides, |offset| {
        // SAFETY: a validated host tensor: every offset `for_each_reached` passes addresses
        // `size_of::<T>()` readable bytes of the producer's buffer.
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

/// Calls `f` with every element offset the layout reaches, at least once each, in work bounded
/// by the memory, not by the indices (a broadcast may have 2^62 of them).
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
        // Distinct elements, or fewer indices than bit-set words: repeats are harmless.
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

/// [`for_each_reached`] through a bit set over the span, by doubling shifts per axis (non-empty).
fn for_each_reached_in_set(
    shape: &[usize],
    strides: &[usize],
    f: impl FnMut(usize) -> Result<(), Error>,
) -> Result<(), Error> {
    let span = span_of(shape, strides);
    let mut reached = BitSet::new(span)?;
    reached.words[0] = 1;
    for (&extent, &stride) in shape.iter().zip(strides) {
        // The union of `reached` shifted by 0..extent strides, in blocks of 2^k multiples.
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
    /// The empty set, or `OutOfMemory` rather than an abort.
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

/// Whether two indices can address one element (sorted by stride, each must step over the rest).
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
    /// [`Parts::strided`] of this owner.
    pub(crate) fn borrowed_layout<T: Element>(
        &self,
        exclusive: bool,
    ) -> Result<(Normalized<T>, BorrowToken), Error> {
        // SAFETY: validated; memory and external context live until the owner, after its views.
        unsafe { self.parts().strided::<T>(exclusive) }
    }
}

#[cfg(test)]
mod tests;
