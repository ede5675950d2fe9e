//! The real `helm` (built from its pinned module by `testbed/build helm`):
//! lint, template and install a chart, with helm's own state kept in a
//! temporary directory so nothing of the user's is read or written.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::binaries;

/// One object `helm template` printed, with the template it came from.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The template's file name (`daemonset.yaml`).
    pub file: String,
    /// The object.
    pub object: Value,
}

fn state_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("ainic-helm-")
            .tempdir()
            .expect("temporary directory for helm")
    })
    .path()
}

/// Runs helm with `args`; `Err` carries its stderr.
pub fn run(args: &[&str]) -> Result<String, String> {
    static HELM: OnceLock<std::path::PathBuf> = OnceLock::new();
    let helm = HELM.get_or_init(|| binaries("helm").join("helm"));
    let state = state_dir();
    let out = Command::new(helm)
        .args(args)
        .env("HELM_CACHE_HOME", state.join("cache"))
        .env("HELM_CONFIG_HOME", state.join("config"))
        .env("HELM_DATA_HOME", state.join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", helm.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "helm {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Writes `values` (JSON is YAML) where helm can read it with `-f`.
pub fn values_file(values: &Value) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile_in(state_dir())
        .expect("values file");
    std::fs::write(file.path(), values.to_string()).expect("write values");
    file
}

/// `helm template RELEASE CHART -n NAMESPACE -f values --kube-version V`,
/// split into objects.
pub fn template(
    chart: &Path,
    release: &str,
    namespace: &str,
    values: &Value,
    kube_version: &str,
) -> Result<Vec<Rendered>, String> {
    let values = values_file(values);
    let text = run(&[
        "template",
        release,
        chart.to_str().expect("UTF-8 path"),
        "--namespace",
        namespace,
        "--kube-version",
        kube_version,
        "-f",
        values.path().to_str().expect("UTF-8 path"),
    ])?;
    split(&text)
}

/// Splits helm's output into objects, each named by its `# Source:` line.
fn split(text: &str) -> Result<Vec<Rendered>, String> {
    let mut out = Vec::new();
    for doc in text.split("\n---") {
        let file = doc
            .lines()
            .find_map(|l| l.strip_prefix("# Source: "))
            .and_then(|s| s.rsplit('/').next())
            .unwrap_or("?")
            .to_string();
        let object: Value = serde_yaml_ng::from_str(doc)
            .map_err(|e| format!("helm printed a document that is not YAML ({file}): {e}"))?;
        if !object.is_null() {
            out.push(Rendered { file, object });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_split_and_named_by_their_source() {
        let text = "---\n# Source: chart/templates/a.yaml\nkind: A\n---\n# Source: chart/templates/b.yaml\nkind: B\nx: 1\n---\n# Source: chart/templates/empty.yaml\n";
        let docs = split(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].file, "a.yaml");
        assert_eq!(docs[1].object["x"], 1);
    }
}
