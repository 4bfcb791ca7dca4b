// After a derive error the struct still implements `IntoDLPack` (a stub), so its uses report
// nothing more: one error, at the attribute.
use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(dat)]
    pixels: Vec<u8>,
}

fn export<T: IntoDLPack + Send + 'static>(value: T) {
    let _ = value.into_managed_tensor_versioned();
}

fn main() {
    export(Image { pixels: vec![] });
}
