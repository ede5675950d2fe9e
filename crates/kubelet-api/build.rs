//! Compiles the kubelet API `.proto` files with `protox` (pure Rust, no
//! system `protoc`) and generates prost messages plus tonic clients/servers.

const PROTOS: &[&str] = &[
    "dra/v1/api.proto",
    "dra/v1beta1/api.proto",
    "dra-health/v1/api.proto",
    "dra-health/v1alpha1/api.proto",
    "pluginregistration/v1/api.proto",
    "deviceplugin/v1beta1/api.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(files)?;
    Ok(())
}
