use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
#[dlpack(read_only, legacy_read_only = "always")]
struct Frame {
    #[dlpack(data)]
    pixels: std::sync::Arc<[u8]>,
}

fn main() {}
