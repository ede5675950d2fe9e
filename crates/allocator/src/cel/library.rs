//! The Kubernetes CEL libraries DRA selectors may use, on top of the
//! standard library: quantity, semver, sets and `cel.bind`. The strings,
//! lists and math extensions come from the `cel` crate.

use cel::common::ast::{ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelString, DYN_TYPE};
use cel::common::value::{CowVal, FromVal, Val};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{DeclarationError, Env, ExecutionError};

use super::values::{QuantityVal, SemverVal};
use crate::quantity::Quantity;
use crate::semver::Semver;

/// `includes()`, declared from 1.36 (upstream's stored-expression
/// environment, which the allocator compiles for, has it whatever
/// `DRAListTypeAttributes` says): whether a list holds the argument, or a
/// scalar equals it.
pub(crate) fn register_includes(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "includes",
        "list_includes_dyn_dyn",
        DYN_TYPE,
        vec![DYN_TYPE],
        includes,
    )
}

fn includes<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [target, arg] = <[CowVal<'b, 'v>; 2]>::try_from(args)
        .map_err(|_| function_error("includes", "takes one argument"))?;
    let found = match CelList::from_val(&*target) {
        Some(list) => elements(list)?.iter().any(|item| item.equals(&*arg)),
        None => target.equals(&*arg),
    };
    Ok(CowVal::owned(CelBool::from(found)))
}

/// Registers every DRA library on `env`.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_extension(cel::extensions::strings)?;
    env.add_extension(cel::extensions::lists)?;
    env.add_extension(cel::extensions::math)?;
    quantity_library(env)?;
    semver_library(env)?;
    sets_library(env)?;
    env.add_macro(Macro::receiver("bind", 3, bind_macro))?;
    Ok(())
}

fn quantity_library(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn quantity: (CelString) -> Result<QuantityVal>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn q_sign: (QuantityVal) -> CelInt, name = "sign")?;
    cel::add_member_overload!(env, fn q_is_integer: (QuantityVal) -> CelBool, name = "isInteger")?;
    cel::add_member_overload!(env, fn q_as_integer: (QuantityVal) -> Result<CelInt>, name = "asInteger")?;
    cel::add_member_overload!(env, fn q_as_float: (QuantityVal) -> CelDouble, name = "asApproximateFloat")?;
    cel::add_member_overload!(env, fn q_add: (QuantityVal, QuantityVal) -> Result<QuantityVal>, name = "add")?;
    cel::add_member_overload!(env, fn q_add_int: (QuantityVal, CelInt) -> Result<QuantityVal>, name = "add")?;
    cel::add_member_overload!(env, fn q_sub: (QuantityVal, QuantityVal) -> Result<QuantityVal>, name = "sub")?;
    cel::add_member_overload!(env, fn q_sub_int: (QuantityVal, CelInt) -> Result<QuantityVal>, name = "sub")?;
    cel::add_member_overload!(env, fn q_greater: (QuantityVal, QuantityVal) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn q_less: (QuantityVal, QuantityVal) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn q_compare: (QuantityVal, QuantityVal) -> CelInt, name = "compareTo")?;
    Ok(())
}

fn function_error(function: &str, error: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, error)
}

fn quantity(s: &CelString<'_>) -> Result<QuantityVal, ExecutionError> {
    Quantity::parse(s.inner())
        .map(QuantityVal)
        .map_err(|e| function_error("quantity", e))
}
fn is_quantity(s: &CelString<'_>) -> CelBool {
    Quantity::parse(s.inner()).is_ok().into()
}
fn q_sign(q: &QuantityVal) -> CelInt {
    q.0.sign().into()
}
fn q_is_integer(q: &QuantityVal) -> CelBool {
    q.0.as_i64().is_some().into()
}
fn q_as_integer(q: &QuantityVal) -> Result<CelInt, ExecutionError> {
    q.0.as_i64().map(CelInt::from).ok_or_else(|| {
        function_error(
            "asInteger",
            "quantity is not an integer or out of int64 range",
        )
    })
}
fn q_as_float(q: &QuantityVal) -> CelDouble {
    q.0.as_f64().into()
}
fn q_add(a: &QuantityVal, b: &QuantityVal) -> Result<QuantityVal, ExecutionError> {
    a.0.checked_add(&b.0)
        .map(QuantityVal)
        .map_err(|e| function_error("add", e))
}
fn q_add_int(a: &QuantityVal, b: &CelInt) -> Result<QuantityVal, ExecutionError> {
    q_add(a, &QuantityVal(Quantity::from_int(*b.inner())))
}
fn q_sub(a: &QuantityVal, b: &QuantityVal) -> Result<QuantityVal, ExecutionError> {
    a.0.checked_sub(&b.0)
        .map(QuantityVal)
        .map_err(|e| function_error("sub", e))
}
fn q_sub_int(a: &QuantityVal, b: &CelInt) -> Result<QuantityVal, ExecutionError> {
    q_sub(a, &QuantityVal(Quantity::from_int(*b.inner())))
}
fn q_greater(a: &QuantityVal, b: &QuantityVal) -> CelBool {
    (a.0 > b.0).into()
}
fn q_less(a: &QuantityVal, b: &QuantityVal) -> CelBool {
    (a.0 < b.0).into()
}
fn q_compare(a: &QuantityVal, b: &QuantityVal) -> CelInt {
    (a.0.cmp(&b.0) as i64).into()
}

fn semver_library(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn semver: (CelString) -> Result<SemverVal>)?;
    cel::add_overload!(env, fn semver_normalize: (CelString, CelBool) -> Result<SemverVal>, name = "semver")?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool)?;
    cel::add_overload!(env, fn is_semver_normalize: (CelString, CelBool) -> CelBool, name = "isSemver")?;
    cel::add_member_overload!(env, fn v_major: (SemverVal) -> CelInt, name = "major")?;
    cel::add_member_overload!(env, fn v_minor: (SemverVal) -> CelInt, name = "minor")?;
    cel::add_member_overload!(env, fn v_patch: (SemverVal) -> CelInt, name = "patch")?;
    cel::add_member_overload!(env, fn v_greater: (SemverVal, SemverVal) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn v_less: (SemverVal, SemverVal) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn v_compare: (SemverVal, SemverVal) -> CelInt, name = "compareTo")?;
    Ok(())
}

fn parse_semver(s: &str, normalize: bool) -> Result<Semver, crate::semver::SemverError> {
    if normalize {
        Semver::parse_normalized(s)
    } else {
        Semver::parse(s)
    }
}
fn semver(s: &CelString<'_>) -> Result<SemverVal, ExecutionError> {
    parse_semver(s.inner(), false)
        .map(SemverVal)
        .map_err(|e| function_error("semver", e))
}
fn semver_normalize(s: &CelString<'_>, n: &CelBool) -> Result<SemverVal, ExecutionError> {
    parse_semver(s.inner(), *n.inner())
        .map(SemverVal)
        .map_err(|e| function_error("semver", e))
}
fn is_semver(s: &CelString<'_>) -> CelBool {
    parse_semver(s.inner(), false).is_ok().into()
}
fn is_semver_normalize(s: &CelString<'_>, n: &CelBool) -> CelBool {
    parse_semver(s.inner(), *n.inner()).is_ok().into()
}
fn version_part(v: u64) -> CelInt {
    i64::try_from(v).unwrap_or(i64::MAX).into()
}
fn v_major(v: &SemverVal) -> CelInt {
    version_part(v.0.major)
}
fn v_minor(v: &SemverVal) -> CelInt {
    version_part(v.0.minor)
}
fn v_patch(v: &SemverVal) -> CelInt {
    version_part(v.0.patch)
}
fn v_greater(a: &SemverVal, b: &SemverVal) -> CelBool {
    (a.0 > b.0).into()
}
fn v_less(a: &SemverVal, b: &SemverVal) -> CelBool {
    (a.0 < b.0).into()
}
fn v_compare(a: &SemverVal, b: &SemverVal) -> CelInt {
    (a.0.cmp(&b.0) as i64).into()
}

fn sets_library(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn sets_contains: (CelList, CelList) -> Result<CelBool>, name = "sets.contains")?;
    cel::add_overload!(env, fn sets_equivalent: (CelList, CelList) -> Result<CelBool>, name = "sets.equivalent")?;
    cel::add_overload!(env, fn sets_intersects: (CelList, CelList) -> Result<CelBool>, name = "sets.intersects")?;
    Ok(())
}

fn elements<'b, 'v>(list: &'b CelList<'v>) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let iterable = list
        .as_iterable()
        .ok_or_else(|| function_error("sets", "not a list"))?;
    let mut items = iterable.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

/// Whether every element of `sub` equals some element of `set`.
fn covers(set: &[&dyn Val], sub: &[&dyn Val]) -> bool {
    sub.iter().all(|x| set.iter().any(|y| x.equals(*y)))
}
fn sets_contains(a: &CelList<'_>, b: &CelList<'_>) -> Result<CelBool, ExecutionError> {
    Ok(covers(&elements(a)?, &elements(b)?).into())
}
fn sets_equivalent(a: &CelList<'_>, b: &CelList<'_>) -> Result<CelBool, ExecutionError> {
    let (a, b) = (elements(a)?, elements(b)?);
    Ok((covers(&a, &b) && covers(&b, &a)).into())
}
fn sets_intersects(a: &CelList<'_>, b: &CelList<'_>) -> Result<CelBool, ExecutionError> {
    let (a, b) = (elements(a)?, elements(b)?);
    Ok(a.iter().any(|x| b.iter().any(|y| x.equals(*y))).into())
}

/// `cel.bind(name, init, body)`: evaluates `init` once and names it in
/// `body`, written as a comprehension over an empty list, as cel-go does.
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(ns)) if ns == "cel") {
        return Ok(None);
    }
    let Expr::Ident(name) = &args[0].expr else {
        return Err(helper.new_error(
            args[0].id,
            "cel.bind() variable name must be a simple identifier",
        ));
    };
    let name = name.clone();
    let body = args.pop().expect("three arguments");
    let init = args.pop().expect("three arguments");
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: name.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(name)),
        result: body,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}
