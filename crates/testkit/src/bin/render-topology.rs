//! `render-topology NAME|FILE DIR`: lays out a topology (a bundled name or
//! a topology YAML file) as a sysfs tree in DIR, for the testbed's real
//! nodes (`scripts/testbed up --node`), which hand it to the agent as its
//! host's `/sys`. Dev-only: the shipped agent never links testkit.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [topology, dir] = args.as_slice() else {
        eprintln!("usage: render-topology NAME|FILE DIR");
        return ExitCode::from(2);
    };
    match render(topology, Path::new(dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("render-topology: {message}");
            ExitCode::FAILURE
        }
    }
}

fn render(topology: &str, dir: &Path) -> Result<(), String> {
    let yaml = match testkit::fixture::bundled_by_name(topology) {
        Some(yaml) => yaml.to_string(),
        None => std::fs::read_to_string(topology).map_err(|e| {
            format!("{topology} is neither a bundled topology nor a readable file: {e}")
        })?,
    };
    let parsed = testkit::fixture::Topology::from_yaml(&yaml)
        .map_err(|e| format!("invalid topology {topology}: {e}"))?;
    parsed
        .render(dir)
        .map_err(|e| format!("failed to render {topology} into {}: {e}", dir.display()))
}
