//! The shared-mutable model (`safe::SharedMut`) for `tests/python/test_shared_mut.py`: a derived
//! mutable class edited in place by Rust while Python views of it live, kornia's shape of class
//! (a mutable class over a backing enum, with its own `__dlpack__` through
//! `export_dlpack_value`), and the opt-in zero-copy legacy export of read-only data.

use std::ffi::c_void;
use std::sync::Arc;

use dlpack_rs::pyo3_glue::{export_dlpack_value, CContig, Dims, PyTensor, TensorViewMut};
use dlpack_rs::safe::{cpu_device, dtype_u8, AlignedBuffer, Buffer, SharedMut, TensorInfo};
use dlpack_rs::IntoDLPack;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// A mutable `h x w x c` u8 image holding `0, 1, 2, ...` (mod 256), whose pixels Rust edits in
/// place: exports are writable views of the one memory.
#[pyclass(module = "dlpack_testext")]
#[derive(IntoDLPack)]
struct SharedImage {
    #[dlpack(data)]
    pixels: SharedMut<u8>,
    #[dlpack(shape)]
    shape: [usize; 3],
}

#[dlpack_rs::pymethods]
impl SharedImage {
    #[new]
    fn new(h: usize, w: usize, c: usize) -> PyResult<Self> {
        let values: Vec<u8> = (0..h * w * c).map(|i| i as u8).collect();
        Ok(SharedImage {
            pixels: SharedMut::from_slice(&values)?,
            shape: [h, w, c],
        })
    }

    /// `255 - p` for every pixel, in place (`BufferError` while another Rust view lives).
    fn invert(&mut self) -> PyResult<()> {
        invert_pixels(&self.pixels)
    }

    /// The pixels, read under a shared guard.
    fn to_list(&self) -> PyResult<Vec<u8>> {
        Ok(self.pixels.to_vec()?)
    }

    #[getter]
    fn data_ptr(&self) -> usize {
        self.pixels.data_ptr() as usize
    }
}

fn invert_pixels(pixels: &SharedMut<u8>) -> PyResult<()> {
    pixels.write()?.iter_mut().for_each(|p| *p = 255 - *p);
    Ok(())
}

/// `image.invert()` while `view`, a mutable view of an import of `image`'s export, lives: the
/// guard must be refused (`BufferError`).
#[pyfunction]
fn shared_invert_during_mut_view(
    image: PyRef<'_, SharedImage>,
    view: TensorViewMut<'_, u8, Dims<3>, CContig>,
) -> PyResult<()> {
    let result = invert_pixels(&image.pixels);
    drop(view);
    result
}

/// `image.invert()` while `view`, rust-numpy's mutable view of an array of `image`'s export,
/// lives: refused (`BufferError`) while this crate's borrow table is the process's (its borrows
/// are the registry's, which the guard meets).
#[pyfunction]
fn shared_invert_during_np_rw(
    image: PyRef<'_, SharedImage>,
    view: numpy::PyReadwriteArrayDyn<'_, u8>,
) -> PyResult<()> {
    let result = invert_pixels(&image.pixels);
    drop(view);
    result
}

/// A shared guard while `view` lives: refused (`BufferError`).
#[pyfunction]
fn shared_read_during_mut_view(
    image: PyRef<'_, SharedImage>,
    view: TensorViewMut<'_, u8, Dims<3>, CContig>,
) -> PyResult<Vec<u8>> {
    let result = image.pixels.to_vec();
    drop(view);
    Ok(result?)
}

/// A mutable view of an import of `image` while Rust holds a read guard: refused
/// (`BufferError`); the guard is dropped either way.
#[pyfunction]
fn shared_mut_view_during_read(image: &Bound<'_, SharedImage>) -> PyResult<()> {
    let pixels = image.borrow().pixels.clone();
    let guard = pixels.read()?;
    let mut imported = PyTensor::from_pyany(image.py(), image.as_any())?;
    let result = imported.as_mut_slice::<u8>().map(drop);
    drop(guard);
    Ok(result?)
}

/// kornia's `Image`, in miniature: a mutable class whose pixels sit in an enum of backings.
#[derive(Clone)]
enum Backing {
    /// Pixels Rust owns and edits in place (shared-mutable).
    Host(SharedMut<u8>),
    /// Pixels from elsewhere, read-only (copy-on-write: an edit makes new pixels).
    Borrowed(Arc<[u8]>),
}

impl Backing {
    fn ptr_len(&self) -> (*mut u8, usize) {
        match self {
            Backing::Host(p) => (p.data_ptr(), p.num_elements()),
            Backing::Borrowed(p) => (p.data_ptr(), p.num_elements()),
        }
    }
}

/// One export's keepalive: a shared handle of the backing and the shape, whose product is the
/// backing's length (checked by `Exported::new`, the one way to make one).
struct Exported {
    backing: Backing,
    shape: [i64; 3],
}

impl Exported {
    fn new(backing: Backing, shape: [usize; 3]) -> PyResult<Self> {
        let (_, len) = backing.ptr_len();
        if shape.iter().product::<usize>() != len {
            return Err(PyValueError::new_err("shape does not match the pixels"));
        }
        Ok(Exported {
            backing,
            shape: shape.map(|d| d as i64),
        })
    }
}

// SAFETY: both backings keep their pixels in an allocation that every clone keeps alive and in
// place; the shape's product is the length (`Exported::new`), so the compact description covers
// exactly the pixels. `Host` memory carries write permission and Rust reaches it only through
// `SharedMut` guards (`rust_access_registered`); `Borrowed` memory is never written by Rust
// while shared and is exported read-only.
unsafe impl IntoDLPack for Exported {
    fn tensor_info(&self) -> TensorInfo {
        let (ptr, _) = self.backing.ptr_len();
        TensorInfo::contiguous(
            ptr.cast::<c_void>(),
            cpu_device(),
            dtype_u8(),
            self.shape.to_vec(),
        )
    }
    fn is_read_only(&self) -> bool {
        matches!(self.backing, Backing::Borrowed(_))
    }
    fn rust_access_registered(&self) -> bool {
        matches!(self.backing, Backing::Host(_))
    }
}

/// A mutable class with its own `__dlpack__`: kornia's shape.
#[pyclass(module = "dlpack_testext")]
struct KorniaImage {
    backing: Backing,
    shape: [usize; 3],
}

#[pymethods]
impl KorniaImage {
    /// `borrowed=False`: host pixels edited in place; `True`: read-only borrowed pixels.
    #[new]
    #[pyo3(signature = (h, w, c, borrowed=false))]
    fn new(h: usize, w: usize, c: usize, borrowed: bool) -> PyResult<Self> {
        let values: Vec<u8> = (0..h * w * c).map(|i| i as u8).collect();
        let backing = if borrowed {
            Backing::Borrowed(values.into())
        } else {
            Backing::Host(SharedMut::from_slice(&values)?)
        };
        Ok(KorniaImage {
            backing,
            shape: [h, w, c],
        })
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let exported = Exported::new(self.backing.clone(), self.shape)?;
        export_dlpack_value(py, exported, stream, max_version, dl_device, copy)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    /// `255 - p` for every pixel: in place for host pixels, into new pixels when borrowed.
    fn invert(&mut self) -> PyResult<()> {
        match &self.backing {
            Backing::Host(p) => invert_pixels(p),
            Backing::Borrowed(p) => {
                let new: Vec<u8> = p.iter().map(|x| 255 - x).collect();
                self.backing = Backing::Borrowed(new.into());
                Ok(())
            }
        }
    }

    #[getter]
    fn data_ptr(&self) -> usize {
        self.backing.ptr_len().0 as usize
    }
}

/// Read-only 64-byte aligned float32s `0, 1, ...` whose legacy export (jax's) shares the memory:
/// the explicit opt-in.
#[pyclass(frozen, module = "dlpack_testext")]
#[derive(IntoDLPack)]
#[dlpack(pyclass, read_only, legacy_read_only = "share")]
struct LegacyShared {
    #[dlpack(data)]
    data: AlignedBuffer<f32>,
}

/// The same without the opt-in: a legacy request gets a copy.
#[pyclass(frozen, module = "dlpack_testext")]
#[derive(IntoDLPack)]
#[dlpack(pyclass, read_only)]
struct LegacyCopied {
    #[dlpack(data)]
    data: AlignedBuffer<f32>,
}

fn counting(n: usize) -> PyResult<AlignedBuffer<f32>> {
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    Ok(AlignedBuffer::from_slice(&values)?)
}

/// `(shared, copied)`: read-only data with and without the legacy sharing opt-in, and their
/// data pointers.
#[pyfunction]
fn legacy_read_only_pair(
    py: Python<'_>,
    n: usize,
) -> PyResult<(Py<LegacyShared>, Py<LegacyCopied>, usize, usize)> {
    let shared = LegacyShared { data: counting(n)? };
    let copied = LegacyCopied { data: counting(n)? };
    let (p1, p2) = (shared.data.as_ptr() as usize, copied.data.as_ptr() as usize);
    Ok((Py::new(py, shared)?, Py::new(py, copied)?, p1, p2))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SharedImage>()?;
    m.add_class::<KorniaImage>()?;
    m.add_function(wrap_pyfunction!(shared_invert_during_mut_view, m)?)?;
    m.add_function(wrap_pyfunction!(shared_invert_during_np_rw, m)?)?;
    m.add_function(wrap_pyfunction!(shared_read_during_mut_view, m)?)?;
    m.add_function(wrap_pyfunction!(shared_mut_view_during_read, m)?)?;
    m.add_function(wrap_pyfunction!(legacy_read_only_pair, m)?)?;
    Ok(())
}
