//! The import-validator fuzz harness, shared by the cargo-fuzz target (`fuzz/`) and the
//! regression test `tests/safe/fuzz_regressions.rs`: decodes arbitrary bytes into a managed tensor
//! (version, flags, ndim, shape, strides, byte_offset, dtype, device, NULL pointers), hands it
//! to `from_raw`, and checks the result against an independent model computed in `i128`.
//!
//! Checked for every input: `from_raw` accepts exactly when the model does, never panics,
//! calls the deleter exactly once (never when the deleter is NULL), and an accepted tensor's
//! accessors agree with the model.

#![allow(dead_code)]

use std::cell::Cell;
use std::ffi::c_void;

use dlpack_rs::ffi::*;
use dlpack_rs::safe::{ManagedTensor, ManagedTensorVersioned, TensorInfo};

const MAX_NDIM: usize = TensorInfo::MAX_NDIM;

/// Reads fields from the fuzzer's bytes; past the end everything reads as 0.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        (self.u32() as u64) | ((self.u32() as u64) << 32)
    }
    /// An i64 that is often an edge value (0, 1, -1, powers of two, the extremes).
    fn i64(&mut self) -> i64 {
        match self.u8() {
            0..=99 => (self.u8() % 8) as i64,
            100..=139 => 1i64 << (self.u8() % 63),
            140..=159 => -(1i64 << (self.u8() % 63)),
            160..=169 => i64::MAX - (self.u8() % 4) as i64,
            170..=179 => i64::MIN + (self.u8() % 4) as i64,
            180..=189 => -((self.u8() % 8) as i64),
            _ => self.u64() as i64,
        }
    }
    fn u64_edge(&mut self) -> u64 {
        match self.u8() {
            0..=149 => (self.u8() % 64) as u64,
            150..=199 => 1u64 << (self.u8() % 64),
            200..=219 => u64::MAX - (self.u8() % 4) as u64,
            220..=239 => isize::MAX as u64 - (self.u8() % 64) as u64,
            _ => self.u64(),
        }
    }
}

/// A hand-built producer's allocation: the managed struct first, then its storage.
#[repr(C)]
struct Fake<M> {
    managed: M,
    shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

thread_local! {
    /// Deleter calls on this thread (the harness calls deleters on the thread that imports).
    static DELETES: Cell<usize> = const { Cell::new(0) };
}

unsafe extern "C" fn delete_versioned(ptr: *mut DLManagedTensorVersioned) {
    // SAFETY: made by `run` through Box::into_raw; `managed` is the first field of a repr(C) Fake.
    drop(unsafe { Box::from_raw(ptr.cast::<Fake<DLManagedTensorVersioned>>()) });
    DELETES.with(|d| d.set(d.get() + 1));
}

unsafe extern "C" fn delete_legacy(ptr: *mut DLManagedTensor) {
    // SAFETY: as in `delete_versioned`.
    drop(unsafe { Box::from_raw(ptr.cast::<Fake<DLManagedTensor>>()) });
    DELETES.with(|d| d.set(d.get() + 1));
}

/// 64 readable bytes that accepted small tensors point into (16-byte aligned).
#[repr(C, align(16))]
struct Data([u8; 64]);
static DATA: Data = Data([1; 64]);

/// The decoded metadata, before it is laid out as a `DLTensor`.
#[derive(Debug)]
struct Meta {
    versioned: bool,
    version: DLPackVersion,
    flags: u64,
    ndim: i32,
    shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    dtype: DLDataType,
    device: DLDevice,
    data_null: bool,
    null_deleter: bool,
}

fn decode(bytes: &[u8]) -> Meta {
    let mut r = Reader(bytes);
    let mode = r.u8();
    let versioned = mode & 1 == 0;
    let version = match r.u8() {
        0..=219 => DLPackVersion {
            major: 1,
            minor: (r.u8() % 6) as u32,
        },
        220..=229 => DLPackVersion { major: 0, minor: 0 },
        230..=239 => DLPackVersion { major: 2, minor: 0 },
        240..=244 => DLPackVersion {
            major: 255,
            minor: 0,
        },
        _ => DLPackVersion {
            major: r.u32(),
            minor: r.u32(),
        },
    };
    let flags = match r.u8() {
        0..=199 => (r.u8() & 7) as u64,
        200..=229 => 1u64 << (r.u8() % 64),
        _ => r.u64(),
    };
    let ndim = match r.u8() {
        0..=219 => (r.u8() % 7) as i32,
        220..=229 => -((r.u8() % 3) as i32) - 1,
        230..=234 => 1 << 20,
        235..=239 => MAX_NDIM as i32 + (r.u8() % 3) as i32 - 1,
        240..=244 => i32::MIN,
        _ => r.u32() as i32,
    };
    let shape_null = mode & 2 != 0 && r.u8() < 32;
    let strides_null = mode & 4 != 0;
    // Storage for ndim values when 0 <= ndim <= MAX_NDIM + 1; for any other ndim a short
    // buffer stands in, which the validator must refuse before reading.
    let len = if (0..=MAX_NDIM as i32 + 1).contains(&ndim) {
        ndim as usize
    } else {
        2
    };
    let shape = (!shape_null).then(|| {
        (0..len)
            .map(|i| if i < 8 { r.i64() } else { 1 })
            .collect::<Vec<_>>()
    });
    let strides = (!strides_null).then(|| {
        (0..len)
            .map(|i| if i < 8 { r.i64() } else { 0 })
            .collect::<Vec<_>>()
    });
    let byte_offset = r.u64_edge();
    let dtype = match r.u8() {
        0..=199 => {
            let (code, bits) = [
                (0u8, 8u8),
                (0, 32),
                (1, 8),
                (2, 16),
                (2, 64),
                (4, 16),
                (5, 128),
                (6, 8),
                (6, 1),
                (8, 8),
                (15, 6),
                (17, 4),
                (17, 8),
                (0, 1),
                (1, 4),
                (3, 64),
            ][(r.u8() % 16) as usize];
            DLDataType {
                code: DLDataTypeCode(code),
                bits,
                lanes: if r.u8() < 230 { 1 } else { r.u16() % 5 },
            }
        }
        _ => DLDataType {
            code: DLDataTypeCode(r.u8()),
            bits: r.u8(),
            lanes: r.u16(),
        },
    };
    let device = DLDevice {
        device_type: DLDeviceType(match r.u8() {
            0..=199 => 1,
            _ => r.u32() as i32,
        }),
        device_id: r.u8() as i32 - 1,
    };
    let data_null = mode & 8 != 0;
    let null_deleter = mode & 16 != 0 && r.u8() < 16;
    Meta {
        versioned,
        version,
        flags,
        ndim,
        shape,
        strides,
        byte_offset,
        dtype,
        device,
        data_null,
        null_deleter,
    }
}

/// What the model expects of an accepted tensor.
#[derive(Debug, PartialEq, Eq)]
struct Expect {
    numel: u128,
    nbytes: u128,
    /// Addressed bytes relative to `data`: [low, high).
    low: i128,
    high: i128,
}

/// The DLPack rules, restated independently in `i128`: `Some` when the tensor is acceptable.
fn model(m: &Meta) -> Option<Expect> {
    if m.versioned {
        if m.version.major != 1 {
            return None;
        }
        if m.flags & !DLPACK_FLAG_BITMASK_ALL_KNOWN != 0 && m.version.minor <= 3 {
            return None;
        }
    }
    if m.ndim < 0 || m.ndim as usize > MAX_NDIM {
        return None;
    }
    let n = m.ndim as usize;
    let shape: &[i64] = match (&m.shape, n) {
        (_, 0) => &[],
        (None, _) => return None,
        (Some(s), _) => s,
    };
    let strides = m.strides.as_deref().map(|s| &s[..n]);
    let d = m.dtype;
    let fixed = match d.code.0 {
        6 => Some(8),
        4 => Some(16),
        7..=14 => Some(8),
        15 | 16 => Some(6),
        17 => Some(4),
        _ => None,
    };
    if d.bits == 0 || d.lanes == 0 || fixed.is_some_and(|f| f != d.bits) {
        return None;
    }
    // FP8 and FP6 are scalars; FP4 comes as one value (jax) or two (torch's x2) per element.
    let lanes_ok = match d.code.0 {
        7..=16 => d.lanes == 1,
        17 => d.lanes == 1 || d.lanes == 2,
        _ => true,
    };
    if !lanes_ok {
        return None;
    }
    if shape.iter().any(|&e| e < 0) {
        return None;
    }
    let numel = if shape.contains(&0) {
        0
    } else {
        shape
            .iter()
            .try_fold(1u128, |acc, &e| acc.checked_mul(e as u128))?
    };
    if numel > usize::MAX as u128 {
        return None;
    }
    let (min, max): (i128, i128) = if numel == 0 {
        (0, -1)
    } else if let Some(strides) = strides {
        let mut min = 0i128;
        let mut max = 0i128;
        for (&e, &s) in shape.iter().zip(strides) {
            let span = s as i128 * (e as i128 - 1);
            if span >= 0 {
                max += span;
            } else {
                min += span;
            }
        }
        (min, max)
    } else {
        (0, numel as i128 - 1)
    };
    // Element indices must be representable as i64 (the strides' own type).
    if min < i64::MIN as i128 || max > i64::MAX as i128 {
        return None;
    }
    let bits = d.bits as i128 * d.lanes as i128;
    let low = m.byte_offset as i128 + (min * bits).div_euclid(8);
    let high = m.byte_offset as i128 + ((max + 1) * bits + 7).div_euclid(8);
    let limit = isize::MAX as i128;
    if m.byte_offset as i128 > limit || low < -limit || high > limit {
        return None;
    }
    let nbytes = (numel * bits as u128).div_ceil(8);
    if nbytes > limit as u128 {
        return None;
    }
    if m.data_null && numel != 0 {
        return None;
    }
    // Padded sub-byte data (elements not a whole number of bytes) is not read.
    if m.versioned && m.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0 && bits % 8 != 0 {
        return None;
    }
    Some(Expect {
        numel,
        nbytes,
        low,
        high,
    })
}

fn tensor(m: &Meta, shape: *mut i64, strides: *mut i64) -> DLTensor {
    DLTensor {
        data: if m.data_null {
            std::ptr::null_mut()
        } else {
            DATA.0.as_ptr().cast_mut().cast::<c_void>()
        },
        device: m.device,
        ndim: m.ndim,
        dtype: m.dtype,
        shape,
        strides,
        byte_offset: m.byte_offset,
    }
}

/// Checks an accepted tensor's view against the model.
fn check_view<K: dlpack_rs::safe::Kind>(view: &dlpack_rs::safe::Managed<K>, m: &Meta, e: &Expect) {
    assert_eq!(view.ndim(), m.ndim as usize);
    assert_eq!(view.numel() as u128, e.numel, "{m:?}");
    assert_eq!(view.nbytes() as u128, e.nbytes, "{m:?}");
    assert_eq!(view.strides().len(), view.ndim());
    let _ = view.is_contiguous();
    let _ = format!("{view:?}");
    // A u8 view is only read when every addressed byte lies inside DATA.
    if !m.data_null && e.low >= 0 && e.high <= DATA.0.len() as i128 && e.numel > 0 {
        if let Ok(s) = view.as_slice::<u8>() {
            assert_eq!(s.len() as u128, e.numel);
        }
    }
}

/// Runs one input; panics (a fuzzer crash) if the validator disagrees with the model, does
/// not call the deleter exactly once, or panics itself.
pub fn run(bytes: &[u8]) {
    let m = decode(bytes);
    let expect = model(&m);
    let mut shape = m.shape.clone();
    let mut strides = m.strides.clone();
    let shape_ptr = shape
        .as_mut()
        .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    let strides_ptr = strides
        .as_mut()
        .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    let before = DELETES.with(Cell::get);
    let accepted = if m.versioned {
        let raw = Box::into_raw(Box::new(Fake {
            managed: DLManagedTensorVersioned {
                version: m.version,
                manager_ctx: std::ptr::null_mut(),
                deleter: (!m.null_deleter).then_some(delete_versioned as _),
                flags: m.flags,
                dl_tensor: tensor(&m, shape_ptr, strides_ptr),
            },
            shape,
            strides,
        }));
        // SAFETY: a live allocation owned by no one else; shape and strides point at ndim
        // values whenever 0 <= ndim <= MAX_NDIM + 1 (outside that range the validator must
        // refuse ndim before reading them, which this harness checks on purpose).
        let r = unsafe { ManagedTensorVersioned::from_raw(raw.cast()) };
        if let (Ok(t), Some(e)) = (&r, &expect) {
            check_view(t, &m, e);
        }
        let ok = r.is_ok();
        drop(r);
        if m.null_deleter {
            // Nobody frees a deleter-less tensor: the producer (this harness) does.
            // SAFETY: `raw` was leaked above and its deleter is NULL, so nothing freed it.
            drop(unsafe { Box::from_raw(raw) });
        }
        ok
    } else {
        let raw = Box::into_raw(Box::new(Fake {
            managed: DLManagedTensor {
                dl_tensor: tensor(&m, shape_ptr, strides_ptr),
                manager_ctx: std::ptr::null_mut(),
                deleter: (!m.null_deleter).then_some(delete_legacy as _),
            },
            shape,
            strides,
        }));
        // SAFETY: as above.
        let r = unsafe { ManagedTensor::from_raw(raw.cast()) };
        if let (Ok(t), Some(e)) = (&r, &expect) {
            check_view(t, &m, e);
        }
        let ok = r.is_ok();
        drop(r);
        if m.null_deleter {
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(raw) });
        }
        ok
    };
    let calls = DELETES.with(Cell::get) - before;
    assert_eq!(
        calls,
        usize::from(!m.null_deleter),
        "deleter calls for {m:?}"
    );
    assert_eq!(
        accepted,
        expect.is_some(),
        "validator and model disagree on {m:?}"
    );
}
