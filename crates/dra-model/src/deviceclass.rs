//! The DeviceClasses shipped with the driver: exclusive PFs (`ainic-pf`),
//! VFs (`ainic-vf`), shared PFs (`ainic-shared`) and fabric partitions
//! (`ainic-fabric`, published by `ainic-dra controller`). Each selects by
//! `device.driver` and the `type` attribute (and `shared`).
//!
//! A NIC fenced to a tenant (attribute `tenant`) is left out of the
//! classes above and reached only through that tenant's classes
//! (`ainic-pf-<tenant>`, `ainic-vf-<tenant>`, `ainic-shared-<tenant>`),
//! which the chart's tenant admission policy keeps to the tenant's
//! namespaces. The attribute is tested with `in` first: reading a missing
//! attribute is a CEL error, which fails the whole claim, not one device.

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::attr;

/// The per-NIC classes: name, `type` and whether shared.
const NIC_CLASSES: [(&str, &str, bool); 3] = [
    ("ainic-pf", "pf", false),
    ("ainic-vf", "vf", false),
    ("ainic-shared", "pf", true),
];

/// Names and CEL selectors of the shipped classes for `driver`, then those
/// of each of `tenants`.
pub fn class_selectors(driver: &str, tenants: &[String]) -> Vec<(String, String)> {
    let nic = |ty: &str, shared: bool, tenant: Option<&str>| {
        let fence = match tenant {
            None => format!(
                "!(\"{a}\" in device.attributes[\"{driver}\"])",
                a = attr::TENANT
            ),
            Some(t) => format!(
                "\"{a}\" in device.attributes[\"{driver}\"] && device.attributes[\"{driver}\"].{a} == \"{t}\"",
                a = attr::TENANT
            ),
        };
        format!(
            "device.driver == \"{driver}\" && device.attributes[\"{driver}\"].{t} == \"{ty}\" && {not}device.attributes[\"{driver}\"].{s} && {fence}",
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
    let mut out: Vec<(String, String)> = NIC_CLASSES
        .iter()
        .map(|(name, ty, shared)| (name.to_string(), nic(ty, *shared, None)))
        .collect();
    out.push(("ainic-fabric".to_string(), partition));
    for tenant in tenants {
        out.extend(NIC_CLASSES.iter().map(|(name, ty, shared)| {
            (tenant_class(name, tenant), nic(ty, *shared, Some(tenant)))
        }));
    }
    out
}

/// A tenant name that is not a DNS label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tenant {0:?} is not a DNS label (1 to 63 of a-z, 0-9 and '-', starting and ending alphanumeric)"
)]
pub struct TenantNameError(pub String);

/// Checks a tenant name: it ends class names and matches a namespace label
/// value, so it must be a DNS label. The error says what is wrong with it.
pub fn check_tenant(tenant: &str) -> Result<(), TenantNameError> {
    if crate::validate::format::is_dns_label(tenant) {
        Ok(())
    } else {
        Err(TenantNameError(tenant.to_string()))
    }
}

/// The name of `tenant`'s variant of the class `base`.
pub fn tenant_class(base: &str, tenant: &str) -> String {
    format!("{base}-{tenant}")
}

/// The tenant whose NICs `class` selects: the value its selector fences
/// on (`device.attributes["<driver>"].tenant == "T"`, as
/// [`class_selectors`] writes it); `None` for a class of no tenant.
pub fn class_tenant(class: &DeviceClass, driver: &str) -> Option<String> {
    let fence = format!("device.attributes[\"{driver}\"].{} == \"", attr::TENANT);
    let selectors = class.spec.as_ref()?.selectors.as_deref()?;
    selectors.iter().find_map(|s| {
        let expression = &s.cel.as_ref()?.expression;
        let (_, rest) = expression.split_once(fence.as_str())?;
        rest.split_once('"').map(|(tenant, _)| tenant.to_string())
    })
}

/// The shipped DeviceClasses for `driver`, with those of `tenants`.
pub fn device_classes(driver: &str, tenants: &[String]) -> Vec<DeviceClass> {
    class_selectors(driver, tenants)
        .into_iter()
        .map(|(name, expression)| DeviceClass {
            metadata: ObjectMeta {
                name: Some(name),
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
/// deviceclasses` prints and, without tenants, `deploy/deviceclasses/`
/// holds).
pub fn device_classes_yaml(
    driver: &str,
    tenants: &[String],
) -> Result<String, serde_yaml_ng::Error> {
    let docs: Result<Vec<String>, _> = device_classes(driver, tenants)
        .iter()
        .map(class_yaml)
        .collect();
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
        let sel = class_selectors("ainic.amd.com", &[]);
        assert_eq!(
            sel.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["ainic-pf", "ainic-vf", "ainic-shared", "ainic-fabric"]
        );
        for (_, expr) in &sel {
            assert!(expr.contains("device.driver == \"ainic.amd.com\""));
        }
        assert!(sel[0].1.contains(".type == \"pf\"") && sel[0].1.contains("!device.attributes"));
        assert!(sel[1].1.contains(".type == \"vf\""));
        assert!(
            sel[2]
                .1
                .contains(".type == \"pf\" && device.attributes[\"ainic.amd.com\"].shared")
        );
        assert!(sel[3].1.ends_with(".type == \"fabric-partition\""));
    }

    #[test]
    fn yaml_has_api_version_and_kind() {
        let y = device_classes_yaml("ainic.amd.com", &[]).unwrap();
        assert_eq!(y.matches("apiVersion: resource.k8s.io/v1").count(), 4);
        assert_eq!(y.matches("kind: DeviceClass").count(), 4);
    }

    #[test]
    fn tenant_devices_are_only_in_their_tenants_classes() {
        let sel = class_selectors("ainic.amd.com", &["team-a".to_string()]);
        let names: Vec<&str> = sel.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[4..],
            ["ainic-pf-team-a", "ainic-vf-team-a", "ainic-shared-team-a"]
        );
        for (_, expr) in &sel[..3] {
            assert!(
                expr.ends_with("!(\"tenant\" in device.attributes[\"ainic.amd.com\"])"),
                "{expr}"
            );
        }
        for (i, (_, expr)) in sel[4..].iter().enumerate() {
            // Same device kind as the shared class, then the tenant test.
            let base = sel[i].1.rsplit_once(" && !(").unwrap().0;
            assert!(expr.starts_with(base), "{expr}");
            assert!(expr.ends_with("\"tenant\" in device.attributes[\"ainic.amd.com\"] && device.attributes[\"ainic.amd.com\"].tenant == \"team-a\""), "{expr}");
        }
    }

    #[test]
    fn a_tenant_class_names_its_tenant() {
        let tenants = ["team-a".to_string()];
        let classes = device_classes("ainic.amd.com", &tenants);
        let found: Vec<Option<String>> = (classes.iter())
            .map(|c| class_tenant(c, "ainic.amd.com"))
            .collect();
        let a = Some("team-a".to_string());
        assert_eq!(found, [None, None, None, None, a.clone(), a.clone(), a]);
        assert_eq!(class_tenant(&classes[4], "other.example.com"), None);
    }
}
