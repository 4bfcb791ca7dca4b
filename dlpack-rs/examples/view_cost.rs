//! The cost of one borrowed view (`as_slice`: dtype, layout and alignment checks, a shared
//! borrow registered in the registry and released), next to the checks alone. Not a test:
//! `cargo run --release -p dlpack-rs --example view_cost` prints ns per call.

use std::time::Instant;

fn main() -> Result<(), dlpack_rs::safe::Error> {
    let t = dlpack_rs::safe::Export::new(vec![1.0f32; 16]).versioned()?;
    let n = 5_000_000u32;
    let mut acc = 0.0f32;
    for round in 0..3 {
        let start = Instant::now();
        for _ in 0..n {
            acc += std::hint::black_box(t.as_slice::<f32>()?)[0];
        }
        let view = start.elapsed().as_nanos() as f64 / f64::from(n);
        let start = Instant::now();
        for _ in 0..n {
            acc += std::hint::black_box(t.numel()) as f32;
            acc += f32::from(u8::from(std::hint::black_box(t.is_contiguous())));
        }
        let checks = start.elapsed().as_nanos() as f64 / f64::from(n);
        println!(
            "round {round}: one borrowed view {view:.1} ns; numel + layout checks {checks:.1} ns"
        );
    }
    std::hint::black_box(acc);
    Ok(())
}
