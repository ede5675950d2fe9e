//! Static checks on a parsed selector: only known variables, bounded
//! nesting, and an upper bound on evaluation cost. The `cel` crate has no
//! runtime cost tracking, so the bound is computed ahead of evaluation from
//! the expression tree: every node costs one, and a comprehension costs its
//! body times the largest size its range can have.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// Deepest bracket nesting accepted before parsing (protects the parser's stack).
const MAX_NESTING: usize = 100;
/// Largest size assumed for a range that is not a literal: device maps hold
/// at most 32 entries and strings at most 64 characters.
const DEFAULT_RANGE_SIZE: u64 = 64;

/// Identifiers usable as call targets for namespaced functions and macros.
const NAMESPACES: &[&str] = &["cel", "sets", "math", "lists", "strings", "optional"];
/// Type identifiers an expression may name, e.g. `type(x) == int`.
const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

pub(super) fn check_nesting(expression: &str) -> Result<(), String> {
    let mut depth = 0usize;
    for c in expression.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_NESTING {
            return Err(format!("nested deeper than {MAX_NESTING} levels"));
        }
    }
    Ok(())
}

/// Fails on an identifier that is neither `device` nor bound by a macro,
/// and on a call of a function for which `declared` is false.
pub(super) fn check_identifiers(
    expr: &IdedExpr,
    declared: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    let mut walk = Walk {
        bound: Vec::new(),
        declared,
    };
    walk.expr(expr)
}

struct Walk<'a> {
    bound: Vec<String>,
    declared: &'a dyn Fn(&str) -> bool,
}

impl Walk<'_> {
    fn expr(&mut self, expr: &IdedExpr) -> Result<(), String> {
        match &expr.expr {
            Expr::Ident(name) => self.ident(name),
            Expr::Call(call) => {
                let namespace = call.target.as_deref().and_then(|t| match &t.expr {
                    Expr::Ident(n) if NAMESPACES.contains(&n.as_str()) => Some(n.as_str()),
                    _ => None,
                });
                let name = match namespace {
                    Some(ns) => format!("{ns}.{}", call.func_name),
                    None => call.func_name.clone(),
                };
                let operator = !name.starts_with(|c: char| c.is_ascii_alphabetic());
                if !operator && !(self.declared)(&name) {
                    return Err(format!("undeclared reference to function '{name}'"));
                }
                if let (Some(target), None) = (&call.target, namespace) {
                    self.expr(target)?;
                }
                call.args.iter().try_for_each(|a| self.expr(a))
            }
            Expr::Comprehension(c) => {
                self.expr(&c.iter_range)?;
                self.expr(&c.accu_init)?;
                let depth = self.bound.len();
                self.bound.push(c.iter_var.clone());
                self.bound.extend(c.iter_var2.clone());
                self.bound.push(c.accu_var.clone());
                let result = [&c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .try_for_each(|e| self.expr(e));
                self.bound.truncate(depth);
                result
            }
            Expr::Select(select) => self.expr(&select.operand),
            Expr::List(list) => list.elements.iter().try_for_each(|e| self.expr(e)),
            Expr::Map(map) => map.entries.iter().try_for_each(|e| self.entry(&e.expr)),
            Expr::Struct(s) => s.entries.iter().try_for_each(|e| self.entry(&e.expr)),
            Expr::Literal(_) | Expr::Unspecified => Ok(()),
        }
    }

    fn ident(&self, name: &str) -> Result<(), String> {
        let known =
            name == "device" || self.bound.iter().any(|b| b == name) || TYPE_NAMES.contains(&name);
        if known {
            Ok(())
        } else {
            Err(format!("undeclared reference to '{name}'"))
        }
    }

    fn entry(&mut self, entry: &EntryExpr) -> Result<(), String> {
        match entry {
            EntryExpr::MapEntry(e) => {
                self.expr(&e.key)?;
                self.expr(&e.value)
            }
            EntryExpr::StructField(f) => self.expr(&f.value),
        }
    }
}

/// An upper bound on the number of evaluation steps.
pub(super) fn estimate(expr: &IdedExpr) -> u64 {
    let sum = |items: &mut dyn Iterator<Item = &IdedExpr>| {
        items.map(estimate).fold(0u64, u64::saturating_add)
    };
    let children = match &expr.expr {
        Expr::Call(call) => sum(&mut call.target.iter().map(|t| &**t).chain(call.args.iter())),
        Expr::Comprehension(c) => {
            let body = estimate(&c.loop_cond).saturating_add(estimate(&c.loop_step));
            range_size(&c.iter_range)
                .saturating_mul(body)
                .saturating_add(estimate(&c.iter_range))
                .saturating_add(estimate(&c.accu_init))
                .saturating_add(estimate(&c.result))
        }
        Expr::Select(select) => estimate(&select.operand),
        Expr::List(list) => sum(&mut list.elements.iter()),
        Expr::Map(map) => map
            .entries
            .iter()
            .map(|e| entry_cost(&e.expr))
            .fold(0, u64::saturating_add),
        Expr::Struct(s) => s
            .entries
            .iter()
            .map(|e| entry_cost(&e.expr))
            .fold(0, u64::saturating_add),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    };
    children.saturating_add(1)
}

fn entry_cost(entry: &EntryExpr) -> u64 {
    match entry {
        EntryExpr::MapEntry(e) => estimate(&e.key).saturating_add(estimate(&e.value)),
        EntryExpr::StructField(f) => estimate(&f.value),
    }
}

/// The most elements a comprehension's range can have.
fn range_size(range: &IdedExpr) -> u64 {
    match &range.expr {
        Expr::List(list) => list.elements.len() as u64,
        Expr::Call(call) if call.func_name == "lists.range" || call.func_name == "range" => {
            match call.args.first() {
                Some(IdedExpr {
                    expr: Expr::Literal(cel::common::ast::LiteralValue::Int(n)),
                    ..
                }) => u64::try_from(*n.inner()).unwrap_or(0),
                _ => u64::MAX,
            }
        }
        _ => DEFAULT_RANGE_SIZE,
    }
}
