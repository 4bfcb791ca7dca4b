//! ndarray integration from outside: views of imported tensors (any strides, byte offsets,
//! alignment and dtype refusals) and zero-copy `Array` / `ArcArray` exports.
#![cfg(feature = "ndarray")]

use core::ffi::c_void;

use ::ndarray::{arr2, s, ArcArray, Array1, Array2, Array3, ArrayD, Axis, IxDyn, ShapeBuilder};
use dlpack_rs::ffi::{DLDeviceType, DLPACK_FLAG_BITMASK_READ_ONLY};
use dlpack_rs::safe::{cpu_device, Buffer, Element, Error, ManagedTensorVersioned, TensorInfo};
use dlpack_rs::safe::{cuda_device, pack_versioned, Export};
use dlpack_rs::IntoDLPack;

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
    let info = TensorInfo::contiguous(ptr, cpu_device(), u16::DTYPE, vec![2]).with_byte_offset(1);
    let raw = pack_versioned(bytes, info, 0);
    // SAFETY: a fresh, valid export of ours.
    let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    assert!(matches!(
        t.as_array::<u16>(),
        Err(Error::Misaligned { align: 2, .. })
    ));

    // Device memory: described only, never dereferenced.
    let info = TensorInfo::contiguous(0x1000 as *mut c_void, cuda_device(0), f32::DTYPE, vec![4]);
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
    match dlpack_rs::safe::try_pack_versioned((), info, 0) {
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

/// A bool view checks each addressed byte once, not each index: a broadcast (stride 0) or
/// overlapping layout may name far more indices than its memory has bytes (found in review: a
/// 2^40-element broadcast view of one `true` took about an hour, holding the GIL).
#[test]
fn bool_values_are_checked_per_address_not_per_index() {
    // 2^62 indices over one byte.
    let t = Export::new(vec![true])
        .shape(&[1u64 << 62])
        .strides(&[0i64])
        .versioned()
        .unwrap();
    let a = t.as_array::<bool>().unwrap();
    assert_eq!(a.len(), 1 << 62);
    assert!(a[[(1usize << 62) - 1]]);
    drop(a);
    // 2^31 x 2^31 indices over 2^32 bytes would be as slow: an overlapping layout over 3
    // bytes (strides 1 and 1: index (i, j) is byte i + j) with 2^30 x 2 indices.
    let t = Export::new(vec![true, false, true])
        .shape(&[2, 1u64 << 30])
        .strides(&[1i64, 0])
        .versioned()
        .unwrap();
    assert!(t.as_array::<bool>().is_ok());
    let t = Export::new(vec![true, false, true])
        .shape(&[2, 2])
        .strides(&[1i64, 1])
        .versioned()
        .unwrap();
    let a = t.as_array::<bool>().unwrap();
    assert_eq!(
        a.iter().copied().collect::<Vec<_>>(),
        [true, false, false, true]
    );
    drop(a);
    // An invalid byte is still found, whichever index reaches it first.
    let mut data = vec![1u8, 0, 7];
    let ptr = data.as_mut_ptr().cast::<c_void>();
    let info = TensorInfo {
        strides: Some(vec![1, 1]),
        ..TensorInfo::contiguous(ptr, cpu_device(), bool::DTYPE, vec![2, 2])
    };
    let raw = pack_versioned(data, info, 0);
    // SAFETY: a fresh, valid export of ours.
    let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    assert_eq!(t.as_array::<bool>().unwrap_err(), Error::InvalidBool);
    // The gaps between addressed bytes are not read: byte 1 (7) is skipped by stride 2 in
    // both axes of this overlapping layout (offsets 0, 2 and 4).
    let mut data = vec![1u8, 7, 0, 7, 1];
    let ptr = data.as_mut_ptr().cast::<c_void>();
    let info = TensorInfo {
        strides: Some(vec![2, 2]),
        ..TensorInfo::contiguous(ptr, cpu_device(), bool::DTYPE, vec![2, 2])
    };
    let raw = pack_versioned(data, info, 0);
    // SAFETY: a fresh, valid export of ours.
    let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    let a = t.as_array::<bool>().unwrap();
    assert_eq!(
        a.iter().copied().collect::<Vec<_>>(),
        [true, false, false, true]
    );
}
