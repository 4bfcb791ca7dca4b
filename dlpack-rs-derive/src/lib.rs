//! `#[derive(IntoDLPack)]` for dlpack-rs (filled in by the derive work).
#![deny(missing_docs)]
