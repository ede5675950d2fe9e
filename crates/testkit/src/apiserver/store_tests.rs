//! Unit tests of the store's REST semantics, without HTTP.

use serde_json::json;

use super::*;
use crate::apiserver::resources::by_plural;

fn slices() -> &'static ResourceType {
    by_plural("resourceslices").unwrap()
}

fn body(name: Option<&str>, generate: Option<&str>) -> Value {
    json!({
        "metadata": {"name": name, "generateName": generate},
        "spec": {"driver": "d", "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}},
    })
}

fn rv(obj: &Value) -> u64 {
    str_field(obj, "metadata.resourceVersion").parse().unwrap()
}

#[test]
fn generate_name_appends_five_characters_and_names_stay_unique() {
    let mut store = Store::new(42);
    let a = store
        .create(slices(), None, body(None, Some("n1-d-")), false)
        .unwrap();
    let b = store
        .create(slices(), None, body(None, Some("n1-d-")), false)
        .unwrap();
    let (na, nb) = (
        str_field(&a, "metadata.name"),
        str_field(&b, "metadata.name"),
    );
    assert!(na.starts_with("n1-d-") && na.len() == 10, "{na}");
    assert_ne!(na, nb);
    assert_ne!(str_field(&a, "metadata.uid"), str_field(&b, "metadata.uid"));
    let missing = store
        .create(slices(), None, body(None, None), false)
        .unwrap_err();
    assert_eq!((missing.code, missing.reason), (422, "Invalid"));
}

#[test]
fn resource_versions_grow_and_stale_updates_conflict() {
    let mut store = Store::new(1);
    let created = store
        .create(slices(), None, body(Some("s"), None), false)
        .unwrap();
    let mut next = created.clone();
    next["spec"]["pool"]["generation"] = json!(2);
    let updated = store.update(slices(), None, "s", next, None).unwrap();
    assert!(rv(&updated) > rv(&created));
    assert_eq!(
        updated["metadata"]["generation"],
        json!(2),
        "spec change bumps metadata.generation"
    );
    let mut stale = created;
    stale["spec"]["pool"]["generation"] = json!(3);
    let err = store.update(slices(), None, "s", stale, None).unwrap_err();
    assert_eq!((err.code, err.reason), (409, "Conflict"));
    // Without a resourceVersion the update is unconditional.
    let mut blind = updated.clone();
    blind["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    blind["spec"]["pool"]["generation"] = json!(4);
    assert!(rv(&store.update(slices(), None, "s", blind, None).unwrap()) > rv(&updated));
}

#[test]
fn events_record_every_change_in_order() {
    let mut store = Store::new(1);
    let start = store.resource_version();
    let created = store
        .create(slices(), None, body(Some("s"), None), false)
        .unwrap();
    store.delete(slices(), None, "s", &json!({})).unwrap();
    let kinds: Vec<&str> = store.events_since(start).map(|e| e.kind).collect();
    assert_eq!(kinds, ["ADDED", "DELETED"]);
    assert_eq!(store.events_since(rv(&created)).count(), 1);
    assert_eq!(store.get(slices(), None, "s").unwrap_err().code, 404);
}
