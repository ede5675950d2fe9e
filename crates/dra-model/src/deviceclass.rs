//! The DeviceClasses shipped with the driver: exclusive PFs (`ainic-pf`),
//! VFs (`ainic-vf`), shared PFs (`ainic-shared`) and fabric partitions
//! (`ainic-fabric`, published by `ainic-dra controller`). Each selects by
//! `device.driver` and the `type` attribute (and `shared`).

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::attr;

/// Names and CEL selectors of the shipped classes, for `driver`.
pub fn class_selectors(driver: &str) -> Vec<(&'static str, String)> {
    let base = |ty: &str, shared: bool| {
        format!(
            "device.driver == \"{driver}\" && device.attributes[\"{driver}\"].{t} == \"{ty}\" && {not}device.attributes[\"{driver}\"].{s}",
            t = attr::TYPE,
            s = attr::SHARED,
            not = if shared { "" } else { "!" },
        )
    };
    let partition = format!(
        "device.driver == \"{driver}\" && device.attributes[\"{driver}\"].{t} == \"{ty}\"",
        t = attr::TYPE,
        ty = crate::partitions::TYPE_PARTITION,
    );
    vec![
        ("ainic-pf", base("pf", false)),
        ("ainic-vf", base("vf", false)),
        ("ainic-shared", base("pf", true)),
        ("ainic-fabric", partition),
    ]
}

/// The shipped DeviceClasses for `driver`.
pub fn device_classes(driver: &str) -> Vec<DeviceClass> {
    class_selectors(driver)
        .into_iter()
        .map(|(name, expression)| DeviceClass {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(DeviceClassSpec {
                selectors: Some(vec![DeviceSelector {
                    cel: Some(CELDeviceSelector { expression }),
                }]),
                ..DeviceClassSpec::default()
            }),
        })
        .collect()
}

/// The classes as one multi-document YAML stream (what `ainic-dra
/// deviceclasses` prints and `deploy/deviceclasses/` holds).
pub fn device_classes_yaml(driver: &str) -> Result<String, serde_yaml_ng::Error> {
    let docs: Result<Vec<String>, _> = device_classes(driver).iter().map(class_yaml).collect();
    Ok(docs?.join("---\n"))
}

/// One class as YAML with `apiVersion` and `kind`.
pub fn class_yaml(class: &DeviceClass) -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_select_by_driver_type_and_sharing() {
        let sel = class_selectors("ainic.amd.com");
        assert_eq!(
            sel.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            ["ainic-pf", "ainic-vf", "ainic-shared", "ainic-fabric"]
        );
        for (_, expr) in &sel {
            assert!(expr.contains("device.driver == \"ainic.amd.com\""));
        }
        assert!(sel[0].1.contains(".type == \"pf\"") && sel[0].1.contains("!device.attributes"));
        assert!(sel[1].1.contains(".type == \"vf\""));
        assert!(sel[2].1.contains(".type == \"pf\"") && !sel[2].1.contains('!'));
        assert!(sel[3].1.ends_with(".type == \"fabric-partition\""));
    }

    #[test]
    fn yaml_has_api_version_and_kind() {
        let y = device_classes_yaml("ainic.amd.com").unwrap();
        assert_eq!(y.matches("apiVersion: resource.k8s.io/v1").count(), 4);
        assert_eq!(y.matches("kind: DeviceClass").count(), 4);
    }
}
