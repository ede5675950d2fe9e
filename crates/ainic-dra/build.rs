//! Link flags of the `ainic-dra` binary.
//!
//! `-z pack-relative-relocs` stores the binary's relative relocations as
//! RELR, a bitmap, instead of one 24-byte RELA entry each: the image's
//! binary was carrying 0.57 MB of them, which the dynamic loader reads at
//! every start and which then stay resident for the agent's life. The
//! loader applies them the same way (position independence, so ASLR, is
//! kept). It needs GNU ld ≥ 2.38 or lld ≥ 15 to link (an older GNU ld
//! warns and ignores the flag) and glibc ≥ 2.36 to run: the linker records
//! `GLIBC_ABI_DT_RELR` among the binary's needs, so an older glibc refuses
//! it at load with that name instead of misbehaving. The image's base
//! (Debian 12) has glibc 2.36.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
