//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902) applied to stored objects.
//!
//! Strategic merge patches are applied as merge patches: for the types served
//! here that only differs for keyed lists, which callers should not rely on.

use serde_json::Value;

/// Applies an RFC 7386 merge patch in place.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let Value::Object(target_map) = target else {
        return;
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else {
            merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Splits a JSON pointer into its parent pointer and last token.
fn split_pointer(path: &str) -> Result<(&str, String), String> {
    let idx = path
        .rfind('/')
        .ok_or_else(|| format!("invalid json pointer {path:?}"))?;
    Ok((&path[..idx], unescape(&path[idx + 1..])))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, key) = split_pointer(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(key, value);
            Ok(())
        }
        Some(Value::Array(list)) if key == "-" => {
            list.push(value);
            Ok(())
        }
        Some(Value::Array(list)) => {
            let idx: usize = key
                .parse()
                .map_err(|_| format!("invalid index in {path:?}"))?;
            if idx > list.len() {
                return Err(format!("index out of range in {path:?}"));
            }
            list.insert(idx, value);
            Ok(())
        }
        _ => Err(format!("missing parent of {path:?}")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, key) = split_pointer(path)?;
    let removed = match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => map.remove(&key),
        Some(Value::Array(list)) => match key.parse::<usize>() {
            Ok(idx) if idx < list.len() => Some(list.remove(idx)),
            _ => None,
        },
        _ => None,
    };
    removed.ok_or_else(|| format!("nothing to remove at {path:?}"))
}

fn apply_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let kind = op.get("op").and_then(Value::as_str).unwrap_or_default();
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or("json patch operation without path")?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or(format!("{kind} at {path:?} without value"))
    };
    match kind {
        "add" => add(doc, path, value()?),
        "remove" => remove(doc, path).map(drop),
        "replace" => {
            remove(doc, path)?;
            add(doc, path, value()?)
        }
        "test" if doc.pointer(path) == Some(&value()?) => Ok(()),
        "test" => Err(format!("test failed at {path:?}")),
        "move" | "copy" => {
            let from = op
                .get("from")
                .and_then(Value::as_str)
                .ok_or("missing from")?;
            let moved = if kind == "move" {
                remove(doc, from)?
            } else {
                doc.pointer(from)
                    .cloned()
                    .ok_or(format!("nothing at {from:?}"))?
            };
            add(doc, path, moved)
        }
        other => Err(format!("unknown json patch operation {other:?}")),
    }
}

/// Applies an RFC 6902 JSON patch; the document is untouched on error.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch.as_array().ok_or("json patch must be an array")?;
    let mut doc = target.clone();
    for op in ops {
        apply_op(&mut doc, op)?;
    }
    *target = doc;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_sets_and_removes_keys() {
        let mut doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        merge_patch(
            &mut doc,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}}),
        );
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": 1}})
        );
    }

    #[test]
    fn json_patch_applies_ops_atomically() {
        let mut doc = json!({"spec": {"list": [1, 2]}});
        let ops = json!([{"op": "add", "path": "/spec/list/-", "value": 3},
                         {"op": "replace", "path": "/spec/list/0", "value": 0}]);
        json_patch(&mut doc, &ops).unwrap();
        assert_eq!(doc, json!({"spec": {"list": [0, 2, 3]}}));
        let failing = json!([{"op": "remove", "path": "/spec/list/0"},
                             {"op": "test", "path": "/spec/list/0", "value": 9}]);
        assert!(json_patch(&mut doc, &failing).is_err());
        assert_eq!(doc, json!({"spec": {"list": [0, 2, 3]}}));
    }
}
