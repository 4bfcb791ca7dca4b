//! The exact byte range every view registers: owners of different windows of one buffer conflict
//! exactly when their windows share a byte, whatever the layout (offset starts, negative and
//! gapped strides), and values are checked on every byte of every element.

use std::ffi::c_void;
use std::sync::Arc;

use dlpack_rs::safe::{
    cpu_device, dtype_f32, dtype_u16, pack_versioned, Element, Error, Export,
    ManagedTensorVersioned, TensorInfo,
};

const SHARED: Error = Error::AlreadyBorrowed { exclusive: false };
const EXCLUSIVE: Error = Error::AlreadyBorrowed { exclusive: true };

/// One buffer of `len` f32s that several owners describe (as several `__dlpack__` calls on one
/// numpy array would); the keepalive of each owner is the shared `Arc`.
fn buffer(len: usize) -> Arc<Vec<f32>> {
    Arc::new((0..len).map(|i| i as f32).collect())
}

/// An owner of `shape` / `strides` (in elements) whose first element is element `first` of
/// `data`, reached through `byte_offset` when `by_offset` (else through the data pointer).
fn owner(
    data: &Arc<Vec<f32>>,
    first: usize,
    shape: &[i64],
    strides: &[i64],
    by_offset: bool,
) -> ManagedTensorVersioned {
    let base = data.as_ptr() as *mut c_void;
    let info = if by_offset {
        TensorInfo::strided(
            base,
            cpu_device(),
            dtype_f32(),
            shape.to_vec(),
            strides.to_vec(),
        )
        .with_byte_offset(4 * first as u64)
    } else {
        TensorInfo::strided(
            base.wrapping_byte_add(4 * first),
            cpu_device(),
            dtype_f32(),
            shape.to_vec(),
            strides.to_vec(),
        )
    };
    let raw = pack_versioned(data.clone(), info, 0);
    // SAFETY: a fresh export of memory the keepalive (the Arc) holds. The exclusive views taken
    // below are never dereferenced: they only hold their borrow.
    unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap()
}

/// A contiguous window of `len` elements starting at element `first`.
fn window(data: &Arc<Vec<f32>>, first: usize, len: usize) -> ManagedTensorVersioned {
    owner(data, first, &[len as i64], &[1], first % 2 == 0)
}

/// The elements of `data` that the views alive now cover, as seen by exclusive one-element
/// slices of other owners (each refused exactly when its element is covered).
fn covered(data: &Arc<Vec<f32>>) -> Vec<usize> {
    (0..data.len())
        .filter(|&i| {
            let mut probe = window(data, i, 1);
            let refused = probe.as_mut_slice::<f32>().err();
            if let Some(e) = &refused {
                assert_eq!(*e, EXCLUSIVE);
            }
            refused.is_some()
        })
        .collect()
}

#[test]
fn slices_of_overlapping_windows_at_different_starts_conflict() {
    let data = buffer(8);
    let mut a = window(&data, 0, 4); // elements 0..4
    let mut b = window(&data, 2, 4); // elements 2..6
    {
        let _wa = a.as_mut_slice::<f32>().unwrap();
        assert_eq!(b.as_slice::<f32>().unwrap_err(), SHARED);
        assert_eq!(b.as_mut_slice::<f32>().unwrap_err(), EXCLUSIVE);
    }
    {
        let _wb = b.as_mut_slice::<f32>().unwrap();
        assert_eq!(a.as_slice::<f32>().unwrap_err(), SHARED);
        assert_eq!(a.as_mut_slice::<f32>().unwrap_err(), EXCLUSIVE);
    }
    // Shared views of overlapping windows coexist.
    let ra = a.as_slice::<f32>().unwrap();
    let rb = b.as_slice::<f32>().unwrap();
    assert_eq!(*ra, [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(*rb, [2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn a_slice_registers_exactly_its_elements() {
    let data = buffer(8);
    let t = window(&data, 2, 4);
    let held = t.as_slice::<f32>().unwrap();
    assert_eq!(covered(&data), [2, 3, 4, 5]);
    drop(held);
    assert_eq!(covered(&data), Vec::<usize>::new());
    // Adjacent windows share no byte.
    let mut left = window(&data, 0, 2);
    let mut right = window(&data, 6, 2);
    let mut middle = window(&data, 2, 4);
    let _m = middle.as_mut_slice::<f32>().unwrap();
    assert!(left.as_mut_slice::<f32>().is_ok());
    assert!(right.as_mut_slice::<f32>().is_ok());
}

#[cfg(feature = "ndarray")]
mod arrays {
    use super::*;

    /// Shape [2, 3], strides [-3, -1]: the first element is element 5, the view walks back to 0.
    fn reversed(data: &Arc<Vec<f32>>, by_offset: bool) -> ManagedTensorVersioned {
        owner(data, 5, &[2, 3], &[-3, -1], by_offset)
    }

    #[test]
    fn negative_stride_views_conflict_with_a_contiguous_owner_of_the_same_bytes() {
        let data = buffer(8);
        let mut flat = window(&data, 0, 6);
        for by_offset in [false, true] {
            let mut rev = reversed(&data, by_offset);
            {
                let _w = flat.as_mut_slice::<f32>().unwrap();
                assert_eq!(rev.as_array::<f32>().unwrap_err(), SHARED);
                assert_eq!(rev.as_array_mut::<f32>().unwrap_err(), EXCLUSIVE);
                assert_eq!(rev.copy().unwrap_err(), SHARED);
            }
            {
                let _w = rev.as_array_mut::<f32>().unwrap();
                assert_eq!(flat.as_slice::<f32>().unwrap_err(), SHARED);
            }
            let r = rev.as_array::<f32>().unwrap();
            assert_eq!(
                r.iter().copied().collect::<Vec<_>>(),
                [5., 4., 3., 2., 1., 0.]
            );
            assert_eq!(flat.as_mut_slice::<f32>().unwrap_err(), EXCLUSIVE);
        }
    }

    #[test]
    fn negative_stride_views_register_exactly_their_elements() {
        let data = buffer(8);
        let rev = reversed(&data, true);
        let r = rev.as_array::<f32>().unwrap();
        assert_eq!(covered(&data), [0, 1, 2, 3, 4, 5]);
        drop(r);
        // One negative axis and one positive: shape [2, 2] strides [-4, 1] from element 4
        // addresses elements 0, 1, 4, 5 (registered as 0..=5).
        let mixed = owner(&data, 4, &[2, 2], &[-4, 1], false);
        let m = mixed.as_array::<f32>().unwrap();
        assert_eq!(m.iter().copied().collect::<Vec<_>>(), [4., 5., 0., 1.]);
        assert_eq!(covered(&data), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn gapped_views_register_their_elements_and_no_further() {
        let data = buffer(8);
        // Elements 1, 3, 5: registered exactly (one strided axis), the gaps stay free.
        let mut gapped = owner(&data, 1, &[3], &[2], true);
        {
            let _r = gapped.as_array::<f32>().unwrap();
            assert_eq!(covered(&data), [1, 3, 5]);
        }
        {
            let _w = gapped.as_array_mut::<f32>().unwrap();
            assert_eq!(covered(&data), [1, 3, 5]);
        }
        // Shape [2, 2] strides [3, 1] from element 2: elements 2, 3, 5, 6; its progression's
        // period is one element (gcd of 3 and 1), so it registers 2..=6, element 4 included.
        let two_d = owner(&data, 2, &[2, 2], &[3, 1], false);
        {
            let _r = two_d.as_array::<f32>().unwrap();
            assert_eq!(covered(&data), [2, 3, 4, 5, 6]);
        }
        // A copy holds the same range while it reads, and no more: writers next to it are fine.
        let mut before = window(&data, 0, 1);
        let mut after = window(&data, 6, 2);
        let _wb = before.as_mut_slice::<f32>().unwrap();
        let wa = after.as_mut_slice::<f32>().unwrap();
        let c = gapped.copy().unwrap();
        assert_eq!(*c.as_slice::<f32>().unwrap(), [1.0, 3.0, 5.0]);
        drop(wa);
        let mut last = window(&data, 5, 1);
        let _wl = last.as_mut_slice::<f32>().unwrap();
        assert_eq!(gapped.copy().unwrap_err(), SHARED);
    }
}

/// Bytes 0 and 1 where a view's elements are, and the invalid byte 2 in every gap and one past
/// the end of each axis: a `bool` view checks exactly its own elements, and is accepted.
#[cfg(feature = "ndarray")]
#[test]
fn a_view_checks_exactly_its_elements() {
    use dlpack_rs::safe::dtype_bool;
    // Shape [2, 2], strides [3, 1]: elements at 0, 1, 3, 4; bytes 2 and 5 (one past each row)
    // and 6 (one past the last row) are 2.
    let bytes = vec![1u8, 0, 2, 0, 1, 2, 2, 2];
    let info = TensorInfo::strided(
        bytes.as_ptr() as *mut c_void,
        cpu_device(),
        dtype_bool(),
        vec![2, 2],
        vec![3, 1],
    );
    let raw = pack_versioned(bytes, info, 0);
    // SAFETY: a fresh export of the Vec its keepalive owns.
    let mut t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    assert_eq!(
        t.as_array::<bool>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [true, false, false, true]
    );
    assert!(t.as_array_mut::<bool>().is_ok());
    // A slice of the first three bytes stops before the 2 after it.
    let bytes = vec![0u8, 1, 1, 2];
    let info = TensorInfo::contiguous(
        bytes.as_ptr() as *mut c_void,
        cpu_device(),
        dtype_bool(),
        vec![3],
    );
    let raw = pack_versioned(bytes, info, 0);
    // SAFETY: as above.
    let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    assert_eq!(*t.as_slice::<bool>().unwrap(), [false, true, true]);
    assert_eq!(
        t.as_array::<bool>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [false, true, true]
    );
}

/// A two-byte element whose valid values are 0..=255 (the high byte must be zero): a user type
/// with invalid bit patterns, wider than `bool`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(transparent)]
struct Byte16(u16);

// SAFETY: two bytes, no padding, laid out as a u16; `is_valid_bytes` rejects every value above
// 255, which are the patterns this type declares invalid.
unsafe impl Element for Byte16 {
    const DTYPE: dlpack_rs::ffi::DLDataType = dtype_u16();
    const ANY_BIT_PATTERN: bool = false;
    fn is_valid_bytes(bytes: &[u8]) -> bool {
        assert_eq!(bytes.len() % 2, 0, "whole elements only");
        bytes
            .chunks_exact(2)
            .all(|c| u16::from_ne_bytes([c[0], c[1]]) <= 255)
    }
}

#[test]
fn every_byte_of_every_wide_element_is_checked() {
    for bad in 0..4 {
        let mut v = vec![1u16, 2, 3, 4];
        v[bad] = 0x100;
        let mut t = Export::new(v).versioned().unwrap();
        assert_eq!(
            t.as_slice::<Byte16>().unwrap_err(),
            Error::InvalidBool,
            "{bad}"
        );
        assert_eq!(t.as_mut_slice::<Byte16>().unwrap_err(), Error::InvalidBool);
        #[cfg(feature = "ndarray")]
        {
            assert_eq!(t.as_array::<Byte16>().unwrap_err(), Error::InvalidBool);
            assert_eq!(t.as_array_mut::<Byte16>().unwrap_err(), Error::InvalidBool);
        }
    }
    let t = Export::new(vec![1u16, 2, 255]).versioned().unwrap();
    assert_eq!(
        *t.as_slice::<Byte16>().unwrap(),
        [Byte16(1), Byte16(2), Byte16(255)]
    );
}

#[cfg(feature = "ndarray")]
#[test]
fn every_element_of_a_strided_view_is_checked() {
    // Shape [2, 3] strides [1, 2] over 6 elements: every element addressed once, in an order
    // that is neither the memory's nor the reverse.
    for bad in 0..6 {
        let mut v = vec![7u16; 6];
        v[bad] = 0x8000;
        let t = Export::new(v)
            .shape(&[2, 3])
            .strides(&[1, 2])
            .versioned()
            .unwrap();
        assert_eq!(
            t.as_array::<Byte16>().unwrap_err(),
            Error::InvalidBool,
            "{bad}"
        );
    }
    let t = Export::new(vec![0u16, 1, 2, 3, 4, 5])
        .shape(&[2, 3])
        .strides(&[1, 2])
        .versioned()
        .unwrap();
    let a = t.as_array::<Byte16>().unwrap();
    assert_eq!(a[[1, 2]], Byte16(5));
    assert_eq!(a[[1, 0]], Byte16(1));
}
