//! The fabric config file (`--fabric-config`, YAML): any text. It may be
//! refused with an error naming the problem; it must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = dra_model::fabric::FabricFile::parse(text, "fuzz.yaml");
    }
});
