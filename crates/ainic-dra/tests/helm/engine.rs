//! A small stand-in for `helm template`: renders a chart's templates with
//! the `gtmpl` Go-template engine and the few Helm/sprig functions the
//! chart uses (`include`, `toYaml`, `indent`, `nindent`, `quote`, `default`,
//! `keys`, `sortAlpha`, `join`), then splits the output into objects.
//!
//! Like Helm it exposes `.Values` (the chart's values.yaml deep-merged with
//! overrides), `.Release` and `.Chart`. Unlike Helm, a missing value prints
//! `<no value>`: rendering fails on it, so a misspelt key cannot hide.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use gtmpl::{Context, Func, FuncError, Template, Value};
use serde_json::{Map, Value as Json};

/// One rendered Kubernetes object and the template file it came from.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub file: String,
    pub object: Json,
}

/// The release a chart is rendered for.
pub struct Release<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
}

thread_local! {
    /// The chart's `_*.tpl` files, for `include` (gtmpl functions are plain
    /// `fn` pointers, so they cannot capture the template set).
    static HELPERS: RefCell<String> = const { RefCell::new(String::new()) };
}

const FUNCS: &[(&str, Func)] = &[
    ("include", include),
    ("toYaml", to_yaml),
    ("indent", indent),
    ("nindent", nindent),
    ("quote", quote),
    ("default", default),
    ("keys", keys),
    ("sortAlpha", sort_alpha),
    ("join", join),
];

/// Renders every template of the chart at `dir` with `overrides` merged
/// into its values.
pub fn render(dir: &Path, overrides: Json, release: &Release) -> Result<Vec<Rendered>, String> {
    let chart: Json = read_yaml(&dir.join("Chart.yaml"))?;
    let mut values: Json = read_yaml(&dir.join("values.yaml"))?;
    merge(&mut values, overrides);
    let root = serde_json::json!({
        "Values": values,
        "Release": {"Name": release.name, "Namespace": release.namespace, "Service": "Helm"},
        "Chart": {
            "Name": chart["name"],
            "Version": chart["version"],
            "AppVersion": chart["appVersion"],
        },
    });
    let (helpers, templates) = template_files(&dir.join("templates"))?;
    HELPERS.with(|h| *h.borrow_mut() = helpers.clone());
    let mut out = Vec::new();
    for path in templates {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
        let rendered = execute(&file, &helpers, &text, &root)?;
        if rendered.contains("<no value>") {
            return Err(format!(
                "{file}: a template refers to a missing value:\n{rendered}"
            ));
        }
        for (index, doc) in split_documents(&rendered).into_iter().enumerate() {
            let object: Json = serde_yaml::from_str(&doc)
                .map_err(|e| format!("{file}: document {}: {e}\n{doc}", index + 1))?;
            if !object.is_null() {
                out.push(Rendered {
                    file: file.clone(),
                    object,
                });
            }
        }
    }
    Ok(out)
}

fn read_yaml(path: &Path) -> Result<Json, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The `_*.tpl` helpers (concatenated) and the other templates, by name.
fn template_files(dir: &Path) -> Result<(String, Vec<PathBuf>), String> {
    let mut helpers = String::new();
    let mut templates = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('_') {
            helpers.push_str(&std::fs::read_to_string(&path).map_err(|e| e.to_string())?);
            helpers.push('\n');
        } else if name.ends_with(".yaml") {
            templates.push(path);
        }
    }
    Ok((helpers, templates))
}

fn execute(name: &str, helpers: &str, text: &str, data: &Json) -> Result<String, String> {
    let mut template = Template::with_name(name);
    template.add_funcs(FUNCS);
    template
        .add_template("_helpers", helpers)
        .map_err(|e| format!("_helpers: {e}"))?;
    template.parse(text).map_err(|e| format!("{name}: {e}"))?;
    template
        .render(&Context::from(to_gtmpl(data)))
        .map_err(|e| format!("{name}: {e}"))
}

/// Documents separated by `---` lines.
fn split_documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else {
            let doc = docs.last_mut().unwrap();
            doc.push_str(line);
            doc.push('\n');
        }
    }
    docs
}

/// Deep merge like Helm's `--set`/`-f`: maps merge, anything else replaces.
pub fn merge(base: &mut Json, over: Json) {
    match (base, over) {
        (Json::Object(b), Json::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn to_gtmpl(v: &Json) -> Value {
    match v {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Value::from(u),
            (None, Some(i)) => Value::from(i),
            _ => Value::from(n.as_f64().unwrap_or_default()),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(to_gtmpl).collect()),
        Json::Object(o) => Value::Map(o.iter().map(|(k, v)| (k.clone(), to_gtmpl(v))).collect()),
    }
}

fn to_json(v: &Value) -> Json {
    match v {
        Value::NoValue | Value::Nil | Value::Function(_) => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::String(s) => Json::String(s.clone()),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Json::from(u)
            } else if let Some(i) = n.as_i64() {
                Json::from(i)
            } else {
                Json::from(n.as_f64().unwrap_or_default())
            }
        }
        Value::Array(a) => Json::Array(a.iter().map(to_json).collect()),
        Value::Object(o) | Value::Map(o) => Json::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect::<Map<_, _>>(),
        ),
    }
}

fn arg<'a>(name: &str, args: &'a [Value], i: usize) -> Result<&'a Value, FuncError> {
    args.get(i)
        .ok_or_else(|| FuncError::AtLeastXArgs(name.into(), i + 1))
}

fn text(name: &str, v: &Value) -> Result<String, FuncError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Ok(v.to_string()),
        _ => Err(FuncError::Generic(format!(
            "{name}: expected a string, got {v}"
        ))),
    }
}

fn count(name: &str, v: &Value) -> Result<usize, FuncError> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| FuncError::Generic(format!("{name}: bad count {n}"))),
        _ => Err(FuncError::Generic(format!(
            "{name}: expected a number, got {v}"
        ))),
    }
}

/// `include NAME DATA`: renders a named template into a string.
fn include(args: &[Value]) -> Result<Value, FuncError> {
    let name = text("include", arg("include", args, 0)?)?;
    let data = arg("include", args, 1)?.clone();
    let helpers = HELPERS.with(|h| h.borrow().clone());
    let mut template = Template::with_name("__include");
    template.add_funcs(FUNCS);
    template
        .add_template("_helpers", helpers)
        .map_err(|e| FuncError::Generic(e.to_string()))?;
    template
        .parse(format!("{{{{ template {name:?} . }}}}"))
        .map_err(|e| FuncError::Generic(e.to_string()))?;
    let out = template
        .render(&Context::from(data))
        .map_err(|e| FuncError::Generic(format!("include {name}: {e}")))?;
    Ok(Value::String(out))
}

/// `toYaml V`: YAML without the trailing newline.
fn to_yaml(args: &[Value]) -> Result<Value, FuncError> {
    let json = to_json(arg("toYaml", args, 0)?);
    let yaml = serde_yaml::to_string(&json).map_err(|e| FuncError::Generic(e.to_string()))?;
    Ok(Value::String(yaml.trim_end().to_string()))
}

fn pad(n: usize, s: &str) -> String {
    let pad = " ".repeat(n);
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

/// `indent N S`.
fn indent(args: &[Value]) -> Result<Value, FuncError> {
    let n = count("indent", arg("indent", args, 0)?)?;
    Ok(Value::String(pad(
        n,
        &text("indent", arg("indent", args, 1)?)?,
    )))
}

/// `nindent N S`: a newline, then `indent N S`.
fn nindent(args: &[Value]) -> Result<Value, FuncError> {
    let n = count("nindent", arg("nindent", args, 0)?)?;
    let s = text("nindent", arg("nindent", args, 1)?)?;
    Ok(Value::String(format!("\n{}", pad(n, &s))))
}

/// `quote V...`: each value as a double-quoted string, space separated.
fn quote(args: &[Value]) -> Result<Value, FuncError> {
    let quoted: Vec<String> = args
        .iter()
        .map(|v| serde_json::to_string(&v.to_string()).unwrap_or_default())
        .collect();
    Ok(Value::String(quoted.join(" ")))
}

/// `default D V`: V unless it is empty, else D.
fn default(args: &[Value]) -> Result<Value, FuncError> {
    let fallback = arg("default", args, 0)?;
    match args.get(1) {
        Some(v) if !is_empty(v) => Ok(v.clone()),
        _ => Ok(fallback.clone()),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::NoValue | Value::Nil => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) | Value::Map(o) => o.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Function(_) => false,
    }
}

/// `keys MAP`: its keys (unordered, as in Helm).
fn keys(args: &[Value]) -> Result<Value, FuncError> {
    match arg("keys", args, 0)? {
        Value::Object(o) | Value::Map(o) => {
            Ok(Value::Array(o.keys().cloned().map(Value::String).collect()))
        }
        other => Err(FuncError::Generic(format!(
            "keys: expected a map, got {other}"
        ))),
    }
}

/// `sortAlpha LIST`.
fn sort_alpha(args: &[Value]) -> Result<Value, FuncError> {
    match arg("sortAlpha", args, 0)? {
        Value::Array(a) => {
            let mut items: Vec<String> = a.iter().map(ToString::to_string).collect();
            items.sort();
            Ok(Value::Array(items.into_iter().map(Value::String).collect()))
        }
        other => Err(FuncError::Generic(format!(
            "sortAlpha: expected a list, got {other}"
        ))),
    }
}

/// `join SEP LIST`.
fn join(args: &[Value]) -> Result<Value, FuncError> {
    let sep = text("join", arg("join", args, 0)?)?;
    match arg("join", args, 1)? {
        Value::Array(a) => Ok(Value::String(
            a.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(&sep),
        )),
        other => Err(FuncError::Generic(format!(
            "join: expected a list, got {other}"
        ))),
    }
}
