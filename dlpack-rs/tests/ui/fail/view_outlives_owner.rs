// A slice view borrows its owner: it cannot outlive it, nor coexist with a mutable view.
use dlpack_rs::safe::Export;

fn main() {
    let mut t = Export::new(vec![1.0f32, 2.0]).versioned().unwrap();
    let shared = t.as_slice::<f32>().unwrap();
    let mut exclusive = t.as_mut_slice::<f32>().unwrap();
    exclusive[0] = shared[0];
    let escaped: &[f32] = {
        let owner = Export::new(vec![3.0f32]).versioned().unwrap();
        let view = owner.as_slice::<f32>().unwrap();
        &*Box::leak(Box::new(view))
    };
    let _ = escaped;
}
