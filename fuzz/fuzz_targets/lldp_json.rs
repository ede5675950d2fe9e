//! `lldpcli -f json0 show neighbors` output (`--lldp-json`,
//! `--lldp-command`): any text. It may be refused; it must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = dra_model::fabric::LldpNeighbors::parse(text, "fuzz.json");
    }
});
