//! What the safe export route takes from a `Buffer`: its length through every wrapper, and its
//! pointer through `data_ptr_mut` exactly when the export is writable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dlpack_rs::safe::{Buffer, Export};

#[test]
fn an_arc_of_a_buffer_exports_all_its_elements_read_only() {
    let t = Export::new(Arc::new(vec![1u8, 2, 3])).versioned().unwrap();
    assert_eq!(t.shape(), &[3]);
    assert!(t.is_read_only());
    assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 2, 3]);
    assert_eq!(Arc::new(vec![0u16; 7]).num_elements(), 7);
}

/// A buffer that counts which of its pointer methods the export calls.
struct Probe {
    data: Vec<u32>,
    writable: bool,
    shared_calls: Arc<AtomicUsize>,
    mut_calls: Arc<AtomicUsize>,
}

// SAFETY: the elements live in the Vec's heap allocation, which moving the probe does not move;
// both pointers are the Vec's own (`as_mut_ptr` through `&mut`).
unsafe impl Buffer for Probe {
    type Elem = u32;
    fn data_ptr(&self) -> *mut u32 {
        self.shared_calls.fetch_add(1, Ordering::SeqCst);
        self.data.as_ptr().cast_mut()
    }
    fn data_ptr_mut(&mut self) -> *mut u32 {
        self.mut_calls.fetch_add(1, Ordering::SeqCst);
        self.data.as_mut_ptr()
    }
    fn num_elements(&self) -> usize {
        self.data.len()
    }
    fn is_writable(&self) -> bool {
        self.writable
    }
}

/// The calls of `data_ptr_mut` an export of a probe makes (and whether the export is read-only).
fn mut_calls(writable: bool, read_only: bool, versioned: bool) -> (usize, bool) {
    let (shared_calls, calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let probe = Probe {
        data: vec![1, 2, 3],
        writable,
        shared_calls: shared_calls.clone(),
        mut_calls: calls.clone(),
    };
    let export = if read_only {
        Export::new(probe).read_only()
    } else {
        Export::new(probe)
    };
    let t = if versioned {
        export.versioned().unwrap().into_any()
    } else {
        export.legacy().unwrap().into_any()
    };
    assert_eq!(t.as_slice::<u32>().unwrap(), &[1, 2, 3]);
    assert!(shared_calls.load(Ordering::SeqCst) >= 1);
    (calls.load(Ordering::SeqCst), t.is_read_only())
}

#[test]
fn a_writable_export_takes_its_pointer_through_data_ptr_mut_and_a_read_only_one_does_not() {
    assert_eq!(mut_calls(true, false, true), (1, false));
    assert_eq!(mut_calls(true, false, false), (1, false));
    assert_eq!(mut_calls(true, true, true), (0, true));
    assert_eq!(mut_calls(false, false, true), (0, true));
}

#[cfg(feature = "ndarray")]
#[test]
fn an_arc_array_exports_its_span_read_only() {
    use ndarray::{s, ArcArray, Array1};
    // Every other element of 0..10, right to left: elements 9, 7, 5, 3, 1; the span is 1..=9.
    let a: ArcArray<f64, _> = Array1::from_iter((0..10).map(f64::from))
        .slice_move(s![..;-2])
        .into_shared();
    let lowest = a.as_ptr().wrapping_offset(-8);
    assert_eq!(a.data_ptr().cast_const(), lowest);
    assert_eq!(a.num_elements(), 9);
    assert!(!a.is_writable());
    let t = Export::new(a).versioned().unwrap();
    assert!(t.is_read_only());
    assert_eq!(
        t.as_slice::<f64>().unwrap(),
        &[1., 2., 3., 4., 5., 6., 7., 8., 9.]
    );
}

/// A device buffer's stream order, as a holder of the export (`DLPackTensor::from_export`)
/// takes it from the builder: the buffer's own, and none for plain host buffers.
#[test]
fn an_export_hands_on_its_buffers_stream_order() {
    use dlpack_rs::ffi::DLDevice;
    use dlpack_rs::safe::{Error, StreamOrder};

    struct Order;
    impl StreamOrder for Order {
        fn order_before(&self, _: DLDevice, _: i64) -> Result<(), Error> {
            Ok(())
        }
    }
    struct Ordered(Vec<u8>, Arc<dyn StreamOrder>);
    // SAFETY: the elements live in the Vec's heap allocation, which moving the value does not
    // move; `as_ptr` reads the Vec's raw pointer.
    unsafe impl Buffer for Ordered {
        type Elem = u8;
        fn data_ptr(&self) -> *mut u8 {
            self.0.as_ptr().cast_mut()
        }
        fn num_elements(&self) -> usize {
            self.0.len()
        }
        fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
            Some(self.1.clone())
        }
    }
    let order: Arc<dyn StreamOrder> = Arc::new(Order);
    let export = Export::new(Ordered(vec![1, 2], order.clone()));
    let handed = export.stream_order().expect("the buffer's order");
    assert!(Arc::ptr_eq(&handed, &order));
    assert!(Export::new(vec![1u8]).stream_order().is_none());
}
