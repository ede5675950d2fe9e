//! A build without `AINIC_DRA_PACK_RELOCS=1` (a workstation's, `cargo
//! install`, these tests') asks no more of glibc than the code does: packed
//! relocations, which only glibc ≥ 2.36 loads, are for the image's build
//! alone (crates/ainic-dra/build.rs).

#[test]
fn a_build_without_the_image_flag_needs_no_glibc_2_36_loader() {
    assert_ne!(
        std::env::var("AINIC_DRA_PACK_RELOCS").as_deref(),
        Ok("1"),
        "this test checks a build without the flag"
    );
    let binary = std::fs::read(env!("CARGO_BIN_EXE_ainic-dra")).unwrap();
    let needs_relr = binary
        .windows(b"GLIBC_ABI_DT_RELR".len())
        .any(|w| w == b"GLIBC_ABI_DT_RELR");
    assert!(
        !needs_relr,
        "the binary needs GLIBC_ABI_DT_RELR: it would not start on glibc < 2.36"
    );
}
