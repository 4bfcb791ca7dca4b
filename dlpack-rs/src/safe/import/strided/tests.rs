//! Tests of `import/strided.rs`: the walk over reached offsets and the raw-pointer checks.

use super::*;
use alloc::collections::BTreeSet;
use core::ffi::c_void;

/// Every offset an index reaches, by enumerating the indices.
fn naive(shape: &[usize], strides: &[usize]) -> BTreeSet<usize> {
    let mut set = BTreeSet::new();
    if shape.contains(&0) {
        return set;
    }
    for_each_offset(shape, strides, |o| {
        set.insert(o);
        Ok(())
    })
    .unwrap();
    set
}

fn visits(
    walk: impl FnOnce(&mut dyn FnMut(usize) -> Result<(), Error>) -> Result<(), Error>,
) -> Vec<usize> {
    let mut seen = Vec::new();
    walk(&mut |o| {
        seen.push(o);
        Ok(())
    })
    .unwrap();
    seen
}

/// Layouts of up to four axes, extents up to 9, strides 0 to 150 (spans of several bit-set
/// words, overlapping and not), from a fixed pseudo-random sequence.
fn layouts() -> impl Iterator<Item = (Vec<usize>, Vec<usize>)> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n) as usize
    };
    (0..3000).map(move |_| {
        let ndim = 1 + next(4);
        let shape: Vec<usize> = (0..ndim).map(|_| next(10)).collect();
        let strides: Vec<usize> = (0..ndim)
            .map(|_| match next(3) {
                0 => next(3),
                1 => next(12),
                _ => next(151),
            })
            .collect();
        (shape, strides)
    })
}

#[test]
fn the_bit_set_walk_reaches_exactly_the_addressed_offsets_once_in_order() {
    for (shape, strides) in layouts() {
        if shape.contains(&0) {
            continue;
        }
        let want: Vec<usize> = naive(&shape, &strides).into_iter().collect();
        let got = visits(|f| for_each_reached_in_set(&shape, &strides, f));
        assert_eq!(got, want, "shape {shape:?} strides {strides:?}");
    }
}

#[test]
fn the_reached_walk_visits_every_addressed_offset_and_no_other() {
    for (shape, strides) in layouts() {
        let want = naive(&shape, &strides);
        let got = visits(|f| for_each_reached(&shape, &strides, f));
        assert_eq!(
            got.iter().copied().collect::<BTreeSet<_>>(),
            want,
            "shape {shape:?} strides {strides:?}"
        );
    }
}

#[test]
fn a_broadcast_walk_costs_one_visit_per_address() {
    let visited = visits(|f| for_each_reached(&[1 << 40, 3, 1], &[0, 1, 7], f));
    assert_eq!(visited, [0, 1, 2]);
    // Overlapping, with many more indices than the span has words: the bit set, each
    // offset once.
    let visited = visits(|f| for_each_reached(&[1000, 1000], &[1, 1], f));
    assert_eq!(visited, (0..1999).collect::<Vec<_>>());
    assert!(visits(|f| for_each_reached(&[0, 5], &[1, 1], f)).is_empty());
}

#[test]
fn a_walk_stops_at_the_first_error() {
    let mut calls = 0;
    let err = for_each_reached_in_set(&[4, 4], &[1, 1], |o| {
        calls += 1;
        if o == 2 {
            Err(Error::InvalidBool)
        } else {
            Ok(())
        }
    });
    assert_eq!((err, calls), (Err(Error::InvalidBool), 3));
}

#[test]
fn raw_parts_checks_dtype_pointer_and_exclusive_overlap() {
    let mut data = [0f32; 4];
    let first = data.as_mut_ptr().cast::<c_void>();
    let f32_ = <f32 as Element>::DTYPE;
    let raw_parts = |first, shape, strides, dtype, exclusive| {
        let device = crate::ffi::DLDevice::CPU;
        let p = Parts {
            first,
            shape,
            strides: Some(strides),
            dtype,
            device,
            external: None,
        };
        // SAFETY: no external checker.
        unsafe { p.raw::<f32>(exclusive) }
    };
    let (ptr, token) = raw_parts(first, &[2, 2], &[1, 1], f32_, false).unwrap();
    assert_eq!(ptr, first.cast());
    drop(token);
    assert_eq!(
        raw_parts(first, &[2, 2], &[1, 1], f32_, true).unwrap_err(),
        Error::Overlapping
    );
    let (_, token) = raw_parts(first, &[2, 2], &[2, 1], f32_, true).unwrap();
    drop(token);
    assert!(matches!(
        raw_parts(first, &[4], &[1], <u32 as Element>::DTYPE, false),
        Err(Error::DtypeMismatch { .. })
    ));
    assert_eq!(
        raw_parts(core::ptr::null_mut(), &[4], &[1], f32_, false).unwrap_err(),
        Error::NullData
    );
    // An empty tensor needs no address: NULL, misaligned and overlapping are all fine.
    let (ptr, _) = raw_parts(core::ptr::null_mut(), &[0, 2], &[1, 1], f32_, true).unwrap();
    assert!(ptr.is_null());
    let odd = first.cast::<u8>().wrapping_add(1).cast::<c_void>();
    assert!(matches!(
        raw_parts(odd, &[2], &[1], f32_, false),
        Err(Error::Misaligned { .. })
    ));
}

#[test]
fn contiguous_len_counts_one_c_order_run_and_nothing_else() {
    let len = |shape: &[usize], strides: &[usize], inverted: &[usize]| {
        Normalized::<f32> {
            ptr: core::ptr::null_mut(),
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            inverted: inverted.to_vec(),
        }
        .contiguous_len()
    };
    assert_eq!(len(&[2, 3], &[3, 1], &[]), Some(6));
    assert_eq!(len(&[2, 2], &[2, 1], &[]), Some(4));
    // An axis of extent 1 may have any stride.
    assert_eq!(len(&[1, 3], &[99, 1], &[]), Some(3));
    assert_eq!(len(&[3, 1], &[1, 5], &[]), Some(3));
    assert_eq!(len(&[], &[], &[]), Some(1));
    // Column-major, a gap, or an axis walked backwards: not one run in C order.
    assert_eq!(len(&[2, 3], &[1, 2], &[]), None);
    assert_eq!(len(&[4], &[2], &[]), None);
    assert_eq!(len(&[2, 3], &[3, 1], &[0]), None);
    // Empty: no elements, whatever the layout.
    assert_eq!(len(&[0, 3], &[1, 2], &[1]), Some(0));
}

#[test]
fn element_and_first_address_each_index_within_the_shape_only() {
    let mut buf = [0f32; 8];
    let base = buf.as_mut_ptr();
    let layout = |inverted: &[usize]| Normalized::<f32> {
        ptr: base,
        shape: alloc::vec![2, 3],
        strides: alloc::vec![3, 1],
        inverted: inverted.to_vec(),
    };
    let forward = layout(&[]);
    assert_eq!(forward.first(), base);
    assert_eq!(forward.element(&[0, 0]), Some(base));
    assert_eq!(forward.element(&[1, 2]), Some(base.wrapping_add(5)));
    // Outside the shape, or another number of indices.
    assert_eq!(forward.element(&[2, 0]), None);
    assert_eq!(forward.element(&[0, 3]), None);
    assert_eq!(forward.element(&[1]), None);
    assert_eq!(forward.element(&[1, 2, 0]), None);
    // Axis 0 walked backwards from the lowest element: index 0 is the highest row.
    let inverted = layout(&[0]);
    assert_eq!(inverted.first(), base.wrapping_add(3));
    assert_eq!(inverted.element(&[0, 0]), Some(base.wrapping_add(3)));
    assert_eq!(inverted.element(&[1, 2]), Some(base.wrapping_add(2)));
    assert_eq!(inverted.element(&[2, 0]), None);
}
