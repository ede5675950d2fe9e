//! What `ainic-dra simulate` reads: any JSON or multi-document YAML text,
//! turned into objects, a scheduling question and its answer on the first
//! Node (or `node-a`) with 1.37's defaults. Any of the three answers is
//! fine; a panic is not.
#![no_main]

use allocator::{Features, Release, Scenario, documents};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(objects) = documents(text) else {
        return;
    };
    let node = objects
        .iter()
        .find(|o| o.get("kind").and_then(|k| k.as_str()) == Some("Node"))
        .and_then(|o| o.pointer("/metadata/name")?.as_str())
        .unwrap_or("node-a")
        .to_string();
    let Ok(scenario) = Scenario::from_objects(objects) else {
        return;
    };
    let _ = scenario.solve(Features::for_release(Release::V1_37), &node);
});
