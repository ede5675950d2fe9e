//! Link flags of the `ainic-dra` binary.
//!
//! With `AINIC_DRA_PACK_RELOCS=1` (set by the image's builds: deploy/Dockerfile
//! and scripts/image), `-z pack-relative-relocs` stores the binary's relative
//! relocations as RELR, a bitmap, instead of one 24-byte RELA entry each:
//! the image's agent carried 0.57 MB of them, which the dynamic loader reads
//! at every start. The loader applies them the same way (position
//! independence, so ASLR, is kept). Such a binary needs glibc ≥ 2.36 to run:
//! the linker records `GLIBC_ABI_DT_RELR` among its needs, so an older glibc
//! refuses it by that name. The image's base (Debian 12) has glibc 2.36; a
//! workstation build, which may run on an older glibc, is left as it was.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=AINIC_DRA_PACK_RELOCS");
    let asked = std::env::var("AINIC_DRA_PACK_RELOCS").as_deref() == Ok("1");
    let gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    if asked && gnu {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
