//! Which C exchange table a type publishes (`__dlpack_c_exchange_api__` along its `__mro__`),
//! cached per type with how `requires_grad` is read, while its version tag holds (SAFETY.md).

use std::sync::atomic::{fence, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple, PyType};

use crate::ffi::{
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPACK_EXCHANGE_API_CAPSULE_NAME,
    DLPACK_MAJOR_VERSION,
};
use crate::pyo3_glue::runtime::cpython;
use crate::pyo3_glue::runtime::requires_grad::{is_disabled_torch_function, Grad};

/// How many types the cache remembers (round-robin).
const CACHE_SLOTS: usize = 8;

/// One remembered type (its answer is in [`MIRROR`]), kept alive so no new type reuses its key.
struct Slot {
    key: usize,
    /// The type's version tag before the answer was found.
    tag: u32,
    /// The `requires_grad` descriptor, kept alive (its getter is called directly).
    _grad_descr: Option<Py<PyAny>>,
    _ty: Py<PyType>,
    _capsule: Option<Py<PyAny>>,
}

struct Cache {
    slots: [Option<Slot>; CACHE_SLOTS],
    next: usize,
}

/// The cache's answers, read lock-free (one sequence lock per slot).
struct Mirror {
    seq: AtomicUsize,
    /// The type's address (0: none, as no type lives there), the table (0: none usable, its low
    /// bit [`OVERRIDDEN`]), the version tag (also the direct getter's), and the kind and closure
    /// of [`Grad::to_words`].
    words: [AtomicUsize; 5],
    /// The getter of [`Grad::to_words`], kept as a pointer (with its provenance).
    get: AtomicPtr<()>,
}

impl Mirror {
    const fn empty() -> Mirror {
        Mirror {
            seq: AtomicUsize::new(0),
            words: [const { AtomicUsize::new(0) }; 5],
            get: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The entry for `key`, if this slot holds it and no write overlapped the read.
    fn read(&self, key: usize) -> Option<(usize, Grad, u32)> {
        let word = |i: usize| self.words[i].load(Ordering::Relaxed);
        let before = self.seq.load(Ordering::Acquire);
        if before & 1 == 1 || word(0) != key {
            return None;
        }
        let (api, tag, kind, closure) = (word(1), word(2) as u32, word(3), word(4));
        let get = self.get.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != before {
            return None;
        }
        // SAFETY: `write` stored these words, from one `Grad::to_words`, under this sequence.
        let grad = unsafe { Grad::from_words(kind, get, closure, tag) };
        Some((api, grad, tag))
    }

    /// Publishes an entry (a direct getter's version is `tag`). Only under the cache's mutex.
    fn write(&self, key: usize, api: usize, grad: Grad, tag: u32) {
        let (kind, get, closure) = grad.to_words();
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, value) in self
            .words
            .iter()
            .zip([key, api, tag as usize, kind, closure])
        {
            word.store(value, Ordering::Relaxed);
        }
        self.get.store(get, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }
}

static MIRROR: [Mirror; CACHE_SLOTS] = [const { Mirror::empty() }; CACHE_SLOTS];

/// A `Mutex`, not the GIL (free-threaded builds), never held while Python code runs.
static CACHE: Mutex<Cache> = Mutex::new(Cache {
    slots: [const { None }; CACHE_SLOTS],
    next: 0,
});

/// Walks a header chain to the first table whose major version this crate reads (1.x).
/// # Safety
/// `header` must be NULL or point at a live `DLPackExchangeAPIHeader` whose `prev_api` chain
/// consists of live headers (the producer's tables are static).
unsafe fn select_table(mut header: *const DLPackExchangeAPIHeader) -> *const DLPackExchangeAPI {
    // Bounded, in case a broken producer links its tables in a cycle.
    for _ in 0..16 {
        if header.is_null() {
            break;
        }
        // SAFETY: non-NULL and live by this function's contract.
        let h = unsafe { &*header };
        if h.version.major == DLPACK_MAJOR_VERSION {
            let api = header.cast::<DLPackExchangeAPI>();
            // SAFETY: a 1.x header starts a full DLPackExchangeAPI (newer minors only append).
            if unsafe { (*api).managed_tensor_from_py_object_no_sync.is_some() } {
                return api;
            }
            return core::ptr::null();
        }
        header = h.prev_api;
    }
    core::ptr::null()
}

/// The low bit of a slot's `api` word: the type overrides its table owner's methods.
const OVERRIDDEN: usize = 1;

/// The exchange table an import of `obj` may use instead of `__dlpack__` (cached per type).
pub(crate) fn lookup(obj: &Bound<'_, PyAny>) -> Option<(&'static DLPackExchangeAPI, Grad)> {
    // The type read once, so the cache key and the type an entry keeps are the same object.
    let ty = obj.get_type();
    let (word, grad) = lookup_type(obj.py(), ty.as_ptr() as usize, move || ty);
    if word & OVERRIDDEN != 0 {
        return None;
    }
    // SAFETY: a non-zero word (low bit clear) is a table in a producer's static chain (dlpack.h).
    unsafe { (word as *const DLPackExchangeAPI).as_ref() }.map(|api| (api, grad))
}

/// The exchange table `ty` publishes, overrides or not: to make objects, never to read one.
pub(crate) fn type_table(ty: &Bound<'_, PyType>) -> Option<&'static DLPackExchangeAPI> {
    let (word, _) = lookup_type(ty.py(), ty.as_ptr() as usize, || ty.clone());
    // SAFETY: as in `lookup`, with the flag bit cleared.
    unsafe { ((word & !OVERRIDDEN) as *const DLPackExchangeAPI).as_ref() }
}

/// [`lookup`] by type address `key`: the `api` word and how `requires_grad` is read.
fn lookup_type<'py>(
    py: Python<'py>,
    key: usize,
    ty: impl FnOnce() -> Bound<'py, PyType>,
) -> (usize, Grad) {
    let tracked = cfg!(not(feature = "abi3")) && cpython::minor_version(py) >= 11;
    let now = if tracked {
        // SAFETY: attached (`py`); `key` is a live type (the caller holds it or an instance).
        unsafe { cpython::type_version(key as *mut pyo3::ffi::PyTypeObject) }
    } else {
        0
    };
    // A cached answer holds under its own tag; a type without one (0) is looked up every time.
    let holds = |tag: u32| !tracked || (tag != 0 && tag == now);
    for mirror in &MIRROR {
        if let Some((api, grad, tag)) = mirror.read(key) {
            if holds(tag) {
                return (api, grad);
            }
        }
    }
    let ty = ty();
    // The tag first, then the answer: a change meanwhile resets the tag. A metaclass's own
    // `mro()` may list non-bases, whose changes leave the tag alone: no tag then (0).
    let custom_mro = tracked && !plain_mro(&ty);
    let tag = if tracked && !custom_mro {
        let name = pyo3::intern!(py, "__dlpack__");
        // SAFETY: attached (the `Bound`s prove it), a live type and string.
        unsafe { cpython::assign_type_version(ty.as_type_ptr(), name.as_ptr()) }
    } else {
        0
    };
    let found = type_lookup(&ty, pyo3::intern!(py, "__dlpack_c_exchange_api__"));
    let overridden = found
        .as_ref()
        .is_some_and(|(capsule, holder)| overrides_owner(&ty, &table_owner(capsule, holder)));
    let capsule = found.map(|(capsule, _)| capsule);
    let grad_descr = type_lookup(&ty, pyo3::intern!(py, "requires_grad")).map(|(d, _)| d);
    let grad = match &grad_descr {
        None => Grad::Absent,
        // The direct getter holds only while the tag does: not for a custom order.
        Some(_) if custom_mro => Grad::Getattr,
        Some(descr) => Grad::of_descriptor(&ty, descr, tag),
    };
    let api = match capsule.as_ref().and_then(exchange_capsule) {
        // SAFETY: a "dlpack_exchange_api" capsule points at a producer's static table, starting
        // with a header whose prev_api chain is static too.
        Some(p) => unsafe { select_table(p.as_ptr().cast()) },
        None => core::ptr::null(),
    };
    let word = if api.is_null() {
        0
    } else {
        api as usize | if overridden { OVERRIDDEN } else { 0 }
    };
    if tracked && tag == 0 {
        // Could never hold: not cached (it would only evict one that does).
        return (word, grad);
    }
    let evicted = {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        // One entry per type: a stale one is replaced; another thread's fresh one is kept.
        let same = cache
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.key == key));
        match same {
            Some(i) if cache.slots[i].as_ref().is_some_and(|s| s.tag == tag) => None,
            _ => {
                let i = same.unwrap_or_else(|| {
                    let i = cache.next;
                    cache.next = (i + 1) % CACHE_SLOTS;
                    i
                });
                // Published before the evicted entry's references are dropped (below).
                MIRROR[i].write(key, word, grad, tag);
                cache.slots[i].replace(Slot {
                    key,
                    tag,
                    _grad_descr: grad_descr.map(Bound::unbind),
                    _ty: ty.unbind(),
                    _capsule: capsule.map(Bound::unbind),
                })
            }
        }
    };
    // Dropped unlocked: a type's deallocation may run arbitrary Python code.
    drop(evicted);
    (word, grad)
}

/// Whether `ty`'s metaclass orders its bases with `type.mro`, not its own `mro()`.
fn plain_mro(ty: &Bound<'_, PyType>) -> bool {
    let py = ty.py();
    let Some([_, _, type_mro]) = type_descriptors(py) else {
        return false;
    };
    type_lookup(&ty.get_type(), pyo3::intern!(py, "mro"))
        .is_some_and(|(found, _)| found.is(type_mro.bind(py)))
}

/// `type.__dict__`'s `__mro__` and `__dict__` (no metaclass overrides them), and `type.mro`.
fn type_descriptors(py: Python<'_>) -> Option<&[Py<PyAny>; 3]> {
    static DESCRIPTORS: pyo3::sync::PyOnceLock<[Py<PyAny>; 3]> = pyo3::sync::PyOnceLock::new();
    crate::pyo3_glue::runtime::once::get_or_try_init(&DESCRIPTORS, py, || -> PyResult<_> {
        let dict = py
            .get_type::<PyType>()
            .getattr(pyo3::intern!(py, "__dict__"))?;
        let item = |name| dict.get_item(name).map(Bound::unbind);
        Ok([item("__mro__")?, item("__dict__")?, item("mro")?])
    })
    .ok()
}

/// The pointer of `c` when it is a `"dlpack_exchange_api"` capsule.
fn exchange_capsule(c: &Bound<'_, PyAny>) -> Option<core::ptr::NonNull<core::ffi::c_void>> {
    let capsule = c.cast::<PyCapsule>().ok()?;
    capsule
        .pointer_checked(Some(DLPACK_EXCHANGE_API_CAPSULE_NAME))
        .ok()
}

/// The class a table speaks for: the most basic one in `holder`'s MRO holding it.
fn table_owner<'py>(
    capsule: &Bound<'py, PyAny>,
    holder: &Bound<'py, PyType>,
) -> Bound<'py, PyType> {
    let py = holder.py();
    let name = pyo3::intern!(py, "__dlpack_c_exchange_api__");
    let ours = exchange_capsule(capsule);
    let mut owner = holder.clone();
    for base in holder.mro().iter().skip(1) {
        let Ok(base) = base.cast_into::<PyType>() else {
            continue;
        };
        if let Some((found, at)) = type_lookup(&base, name) {
            if at.is(&base)
                && (found.is(capsule) || (ours.is_some() && exchange_capsule(&found) == ours))
            {
                owner = base;
            }
        }
    }
    owner
}

/// Whether `ty` finds another `__dlpack__` or `__dlpack_device__` than `owner` does.
fn overrides_owner<'py>(ty: &Bound<'py, PyType>, owner: &Bound<'py, PyType>) -> bool {
    if ty.is(owner) {
        return false;
    }
    let py = ty.py();
    let torch_function = pyo3::intern!(py, "__torch_function__");
    // torch's `__dlpack__` dispatches through `__torch_function__`: a subclass may refuse there.
    [
        pyo3::intern!(py, "__dlpack__"),
        pyo3::intern!(py, "__dlpack_device__"),
        torch_function,
    ]
    .into_iter()
    .any(|name| {
        let ours = type_lookup(ty, name).map(|(m, _)| m);
        // torch's "no `__torch_function__`" (nn.Parameter's) dispatches nothing; under any
        // other name the same function is an override (whose call raises).
        if name.is(torch_function) && ours.as_ref().is_some_and(|m| is_disabled_torch_function(m)) {
            return false;
        }
        let owners = type_lookup(owner, name).map(|(m, _)| m);
        match (ours, owners) {
            (Some(a), Some(b)) => !a.is(&b),
            (None, None) => false,
            _ => true,
        }
    })
}

/// `name` as the interpreter finds a special method, and the class whose dictionary holds it.
fn type_lookup<'py>(
    ty: &Bound<'py, PyType>,
    name: &Bound<'py, pyo3::types::PyString>,
) -> Option<(Bound<'py, PyAny>, Bound<'py, PyType>)> {
    let py = ty.py();
    let [mro_of, dict_of, _] = type_descriptors(py)?;
    let get = pyo3::intern!(py, "__get__");
    let mro = mro_of.bind(py).call_method1(get, (ty,)).ok()?;
    let mro = mro.cast::<PyTuple>().ok()?;
    for base in mro.iter() {
        let dict = dict_of.bind(py).call_method1(get, (&base,)).ok()?;
        // `type.__dict__` is a read-only mapping proxy.
        let found = match dict.cast::<PyDict>() {
            Ok(d) => d.get_item(name).ok().flatten(),
            Err(_) => dict.get_item(name).ok(),
        };
        if let Some(found) = found {
            return Some((found, base.cast_into::<PyType>().ok()?));
        }
    }
    None
}
