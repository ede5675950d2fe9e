//! CEL values of the DRA environment: `quantity` and `semver` objects, and
//! the `device` variable, which reads a device's attributes and capacity
//! from the prepared model without copying them into CEL maps.

use std::any::Any;
use std::collections::BTreeMap;

use cel::ExecutionError;
use cel::common::traits::{Container, Indexer, Sizer};
use cel::common::types::{CelBool, CelInt, CelList, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};

use crate::model::{AttributeValue, DeviceInfo};
use crate::quantity::Quantity;
use crate::semver::Semver;

pub(crate) static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");
pub(crate) static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");
static DEVICE_TYPE: Type = Type::new_unspecified_type("dra.Device");
static MAP_TYPE: Type = Type::new_unspecified_type("map");

/// A quantity as a CEL value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QuantityVal(pub Quantity);

impl Val for QuantityVal {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<QuantityVal>()
            .is_some_and(|o| o.0 == self.0)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for QuantityVal {}

/// A semantic version as a CEL value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SemverVal(pub Semver);

impl Val for SemverVal {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<SemverVal>()
            .is_some_and(|o| o.0 == self.0)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for SemverVal {}

fn key(idx: &dyn Val) -> Result<&str, ExecutionError> {
    idx.downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: idx.get_type().name().to_owned(),
            want: "string".to_owned(),
        })
}

/// The `device` variable: `driver`, `attributes`, `capacity` and
/// `allowMultipleAllocations` (the device's value where the allocator
/// passes it, else false).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceVar<'a> {
    pub device: &'a DeviceInfo,
    pub multi_allocations_passed: bool,
}

impl<'a> Val for DeviceVar<'a> {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }
    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}

impl<'a> Indexer for DeviceVar<'a> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let device: &'a DeviceInfo = self.device;
        match key(idx)? {
            "driver" => Ok(CowVal::owned(CelString::from(device.driver.as_str()))),
            "attributes" => Ok(CowVal::owned(Domains::Attributes(&device.attributes))),
            "capacity" => Ok(CowVal::owned(Domains::Capacity(&device.capacity))),
            "allowMultipleAllocations" => Ok(CowVal::owned(CelBool::from(
                self.multi_allocations_passed && device.allow_multiple_allocations,
            ))),
            other => Err(ExecutionError::no_such_key(other)),
        }
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// `device.attributes` or `device.capacity`: domain → names. An unknown
/// domain is an empty map, so that only the missing name is an error.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Domains<'a> {
    Attributes(&'a BTreeMap<String, BTreeMap<String, AttributeValue>>),
    Capacity(&'a BTreeMap<String, BTreeMap<String, Quantity>>),
}

impl<'a> Val for Domains<'a> {
    fn get_type(&self) -> &Type {
        &MAP_TYPE
    }
    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }
    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }
}

impl<'a> Container for Domains<'a> {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        let domain = key(value)?;
        Ok(match self {
            Domains::Attributes(map) => map.contains_key(domain),
            Domains::Capacity(map) => map.contains_key(domain),
        })
    }
}

impl<'a> Sizer for Domains<'a> {
    fn size(&self) -> CelInt {
        let len = match self {
            Domains::Attributes(map) => map.len(),
            Domains::Capacity(map) => map.len(),
        };
        CelInt::from(len as i64)
    }
}

impl<'a> Indexer for Domains<'a> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let domain = key(idx)?;
        Ok(CowVal::owned(match *self {
            Domains::Attributes(map) => Names::Attributes(map.get(domain)),
            Domains::Capacity(map) => Names::Capacity(map.get(domain)),
        }))
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// The names of one domain; a missing name is a "no such key" error.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Names<'a> {
    Attributes(Option<&'a BTreeMap<String, AttributeValue>>),
    Capacity(Option<&'a BTreeMap<String, Quantity>>),
}

impl<'a> Val for Names<'a> {
    fn get_type(&self) -> &Type {
        &MAP_TYPE
    }
    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }
    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }
}

impl<'a> Container for Names<'a> {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        let name = key(value)?;
        Ok(match self {
            Names::Attributes(map) => map.is_some_and(|m| m.contains_key(name)),
            Names::Capacity(map) => map.is_some_and(|m| m.contains_key(name)),
        })
    }
}

impl<'a> Sizer for Names<'a> {
    fn size(&self) -> CelInt {
        let len = match self {
            Names::Attributes(map) => map.map_or(0, BTreeMap::len),
            Names::Capacity(map) => map.map_or(0, BTreeMap::len),
        };
        CelInt::from(len as i64)
    }
}

impl<'a> Indexer for Names<'a> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let name = key(idx)?;
        let missing = || ExecutionError::no_such_key(name);
        match *self {
            Names::Attributes(map) => {
                let value = map.and_then(|m| m.get(name)).ok_or_else(missing)?;
                attribute_val(name, value).map(CowVal::Owned)
            }
            Names::Capacity(map) => {
                let value = map.and_then(|m| m.get(name)).ok_or_else(missing)?;
                Ok(CowVal::owned(QuantityVal(*value)))
            }
        }
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// An attribute as CEL sees it: a scalar, or a list of scalars.
fn attribute_val<'v>(
    name: &str,
    value: &'v AttributeValue,
) -> Result<Box<dyn Val + 'v>, ExecutionError> {
    fn list<'v, T>(items: &'v [T], one: impl Fn(&'v T) -> Box<dyn Val + 'v>) -> Box<dyn Val + 'v> {
        Box::new(CelList::from(items.iter().map(one).collect::<Vec<_>>()))
    }
    Ok(match value {
        AttributeValue::Int(i) => Box::new(CelInt::from(*i)),
        AttributeValue::Bool(b) => Box::new(CelBool::from(*b)),
        AttributeValue::String(s) => Box::new(CelString::from(s.as_str())),
        AttributeValue::Version(v) => Box::new(SemverVal(v.clone())),
        AttributeValue::Ints(v) => list(v, |i| Box::new(CelInt::from(*i))),
        AttributeValue::Bools(v) => list(v, |b| Box::new(CelBool::from(*b))),
        AttributeValue::Strings(v) => list(v, |s| Box::new(CelString::from(s.as_str()))),
        AttributeValue::Versions(v) => list(v, |v| Box::new(SemverVal(v.clone()))),
        AttributeValue::Unset => {
            return Err(ExecutionError::function_error(
                "attributes",
                format!("attribute {name}: unsupported attribute value"),
            ));
        }
    })
}
