//! Compiles the NRI plugin API subset with `protox` (pure Rust, no system
//! `protoc`) into prost messages; the ttrpc envelope and services are
//! written by hand in `src/ttrpc.rs` and `src/plugin.rs`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["nri.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(files)?;
    Ok(())
}
