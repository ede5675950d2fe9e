//! Unit tests of the CEL environment: device variable, libraries, errors.

use std::collections::BTreeMap;

use super::{CompileError, Selector};
use crate::model::{AttributeValue, DeviceInfo, test_device};
use crate::quantity::Quantity;
use crate::semver::Semver;

fn nic() -> DeviceInfo {
    let mut d = test_device("nic-0");
    d.driver = "ainic.amd.com".into();
    let ours = BTreeMap::from([
        ("type".to_owned(), AttributeValue::String("pf".into())),
        ("rail".to_owned(), AttributeValue::Int(3)),
        ("shared".to_owned(), AttributeValue::Bool(true)),
        (
            "firmwareVersion".to_owned(),
            AttributeValue::Version(Semver::parse("1.117.1-a-42").unwrap()),
        ),
    ]);
    let standard = BTreeMap::from([(
        "pcieRoot".to_owned(),
        AttributeValue::String("pci0000:00".into()),
    )]);
    d.attributes = BTreeMap::from([
        ("ainic.amd.com".to_owned(), ours),
        ("resource.kubernetes.io".to_owned(), standard),
    ]);
    d.capacity = BTreeMap::from([(
        "ainic.amd.com".to_owned(),
        BTreeMap::from([("bandwidth".to_owned(), Quantity::parse("400G").unwrap())]),
    )]);
    d.allow_multiple_allocations = true;
    d
}

fn eval(expression: &str) -> Result<bool, String> {
    Selector::compile(expression)
        .map_err(|e| e.to_string())?
        .matches(&nic(), true)
}

fn assert_true(expression: &str) {
    assert_eq!(eval(expression), Ok(true), "{expression}");
}

#[test]
fn device_fields_are_visible() {
    assert_true("device.driver == 'ainic.amd.com'");
    assert_true("device.attributes['ainic.amd.com'].type == 'pf'");
    assert_true("device.attributes['ainic.amd.com'].rail == 3");
    assert_true("device.attributes['ainic.amd.com'].shared");
    assert_true("device.attributes['resource.kubernetes.io'].pcieRoot.startsWith('pci0000')");
    assert_true("device.allowMultipleAllocations");
    assert_true("'ainic.amd.com' in device.attributes");
    assert_true("'rail' in device.attributes['ainic.amd.com']");
}

/// Upstream compiles for stored expressions, which declare the field
/// whatever the gate; an allocator that does not know consumable capacity
/// passes no value, which CEL reads as false.
#[test]
fn allow_multiple_allocations_is_false_where_the_allocator_passes_none() {
    let selector = Selector::compile("device.allowMultipleAllocations").unwrap();
    assert_eq!(selector.matches(&nic(), true), Ok(true));
    assert_eq!(selector.matches(&nic(), false), Ok(false));
}

#[test]
fn missing_attribute_is_an_evaluation_error_but_has_is_false() {
    let err = eval("device.attributes['ainic.amd.com'].nope == 1").unwrap_err();
    assert!(err.contains("nope"), "{err}");
    assert!(eval("device.attributes['other.domain'].x == 1").is_err());
    assert_eq!(eval("has(device.attributes['other.domain'].x)"), Ok(false));
    assert_eq!(
        eval("has(device.attributes['ainic.amd.com'].rail)"),
        Ok(true)
    );
}

#[test]
fn quantity_library() {
    assert_true("device.capacity['ainic.amd.com'].bandwidth.compareTo(quantity('400G')) == 0");
    assert_true("device.capacity['ainic.amd.com'].bandwidth.isGreaterThan(quantity('100Gi'))");
    assert_true("quantity('1.5Gi').isLessThan(quantity('2G'))");
    assert_true("quantity('1k').add(24).asInteger() == 1024");
    assert_true("quantity('1k').sub(quantity('1')).asInteger() == 999");
    assert_true("quantity('500m').asApproximateFloat() == 0.5");
    assert_true("!quantity('500m').isInteger() && quantity('-2').sign() == -1");
    assert_true("isQuantity('10Mi') && !isQuantity('10 apples')");
    assert_true("quantity('1000M') == quantity('1G')");
    assert!(eval("quantity('x') == quantity('1')").is_err());
    assert!(eval("quantity('1.5').asInteger() == 1").is_err());
}

#[test]
fn semver_library() {
    assert_true(
        "device.attributes['ainic.amd.com'].firmwareVersion.isGreaterThan(semver('1.100.0'))",
    );
    assert_true("device.attributes['ainic.amd.com'].firmwareVersion.major() == 1");
    assert_true("semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3");
    assert_true("semver('1.2.3').compareTo(semver('1.2.3-rc.1')) == 1");
    assert_true("semver('v1.2', true).isLessThan(semver('1.10.0'))");
    assert_true("isSemver('1.0.0') && !isSemver('1.0') && isSemver('1.0', true)");
}

#[test]
fn extensions_and_bind() {
    assert_true("device.attributes['ainic.amd.com'].type.upperAscii() == 'PF'");
    assert_true("'a,b'.split(',').size() == 2");
    assert_true(
        "sets.contains([1, 2, 3], [2]) && sets.intersects([1], [1, 5]) && sets.equivalent([1, 2], [2, 1, 1])",
    );
    assert_true("cel.bind(r, device.attributes['ainic.amd.com'].rail, r > 2 && r < 4)");
    assert_true("[1, 2, 3].exists(x, x == device.attributes['ainic.amd.com'].rail)");
    assert_true("math.greatest(1, 5) == 5");
}

#[test]
fn known_functions_compile_and_unknown_ones_do_not() {
    let known = [
        "size('a') == 1 && int('1') == 1 && string(1) == '1' && double(1) == 1.0 && type(1) == int",
        "'abc'.matches('^a') && 'abc'.contains('b') && 'abc'.startsWith('a') && 'abc'.endsWith('c')",
        "'a,b'.split(',').join('-') == 'a-b' && 'abc'.indexOf('b') == 1 && 'ABC'.lowerAscii() == 'abc'",
        "[[1], [2]].flatten().size() == 2 && lists.range(3).size() == 3 && math.least(1, 2) == 1",
        "[1, 2].exists(x, x == 2) && [1].all(x, x > 0) && [1].map(x, x * 2) == [2] && [1, 2].filter(x, x > 1) == [2]",
        "isSemver('1.0.0') && isQuantity('1') && dyn(1) == 1",
    ];
    for expression in known {
        assert!(
            Selector::compile(expression).is_ok(),
            "{expression}: {:?}",
            Selector::compile(expression).err()
        );
        assert_eq!(eval(expression), Ok(true), "{expression}");
    }
    for unknown in [
        "nosuch(1)",
        "device.driver.nosuch()",
        "'a'.reverseIt() == 'a'",
    ] {
        assert!(
            matches!(
                Selector::compile(unknown),
                Err(CompileError::Invalid { .. })
            ),
            "{unknown}"
        );
    }
}

#[test]
fn compile_errors_are_reported() {
    assert!(matches!(
        Selector::compile("device.driver =="),
        Err(CompileError::Invalid { .. })
    ));
    assert!(matches!(
        Selector::compile("devcie.driver == 'x'"),
        Err(CompileError::Invalid { .. })
    ));
    assert!(
        Selector::compile("[1].all(x, x > 0) && x == 1").is_err(),
        "macro variable out of scope"
    );
}

#[test]
fn cost_bound_rejects_expensive_expressions() {
    let long = format!(
        "device.driver == '{}'",
        "a".repeat(super::MAX_EXPRESSION_LENGTH)
    );
    assert!(matches!(
        Selector::compile(&long),
        Err(CompileError::TooExpensive { .. })
    ));
    let deep = format!("{}true{}", "(".repeat(200), ")".repeat(200));
    assert!(matches!(
        Selector::compile(&deep),
        Err(CompileError::TooExpensive { .. })
    ));
    let nested = "lists.range(1000).all(a, lists.range(1000).all(b, lists.range(1000).all(c, a + b + c >= 0)))";
    assert!(matches!(
        Selector::compile(nested),
        Err(CompileError::TooExpensive { .. })
    ));
    assert!(Selector::compile("lists.range(10).all(a, a >= 0)").is_ok());
}

#[test]
fn non_bool_result_is_an_error() {
    assert!(eval("device.attributes['ainic.amd.com'].rail").is_err());
}

fn with_lists() -> DeviceInfo {
    let mut d = nic();
    let ours = d.attributes.get_mut("ainic.amd.com").unwrap();
    ours.insert("numa".into(), AttributeValue::Ints(vec![0, 1]));
    ours.insert(
        "zones".into(),
        AttributeValue::Strings(vec!["z1".into(), "z2".into()]),
    );
    d
}

/// `DRAListTypeAttributes`: lists are CEL lists, and `includes()` (declared
/// from 1.36) asks a list for an element or a scalar for itself.
#[test]
fn list_attributes_are_lists_and_includes_is_declared_from_1_36() {
    let eval = |e: &str| {
        Selector::compile_for(e, true)
            .unwrap()
            .matches(&with_lists(), true)
    };
    for yes in [
        "device.attributes['ainic.amd.com'].numa.includes(1)",
        "device.attributes['ainic.amd.com'].rail.includes(3)",
        "'z2' in device.attributes['ainic.amd.com'].zones",
        "device.attributes['ainic.amd.com'].zones.exists(z, z == 'z1')",
        "size(device.attributes['ainic.amd.com'].numa) == 2",
    ] {
        assert_eq!(eval(yes), Ok(true), "{yes}");
    }
    assert_eq!(
        eval("device.attributes['ainic.amd.com'].numa.includes(7)"),
        Ok(false)
    );
    assert!(matches!(
        Selector::compile("device.attributes['ainic.amd.com'].numa.includes(1)"),
        Err(CompileError::Invalid { .. })
    ));
}

/// Upstream converts every attribute before it evaluates, so a device with
/// an attribute that has no value fails any selector.
#[test]
fn an_attribute_without_a_value_fails_every_selector_on_its_device() {
    let mut d = nic();
    d.attributes
        .get_mut("ainic.amd.com")
        .unwrap()
        .insert("broken".into(), AttributeValue::Unset);
    let error = Selector::compile("device.driver == 'ainic.amd.com'")
        .unwrap()
        .matches(&d, true)
        .unwrap_err();
    assert!(
        error.contains("ainic.amd.com/broken: unsupported attribute value"),
        "{error}"
    );
}
