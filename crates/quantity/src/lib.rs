//! Kubernetes `resource.Quantity` values: parsing, exact comparison and
//! arithmetic.
//!
//! k8s-openapi carries a quantity as its string form only, and no well-kept
//! crate implements the Kubernetes grammar (binary `Ki`..`Ei`, decimal
//! `n`..`E` suffixes and `e`/`E` exponents) with exact comparison. The
//! allocator must compare capacities exactly (`400G` equals `400000M`), and
//! the validator must agree with it, so this small crate does it for both: a
//! quantity is an exact decimal `mantissa × 10^exponent` with up to 38
//! significant digits, which holds every value the API accepts, binary
//! suffixes included (a finite decimal times a power of two is a finite
//! decimal).
//!
//! Like Kubernetes, a quantity remembers the [`Format`] it was written in
//! (decimal SI, binary SI or decimal exponent) and [`Quantity::canonical`]
//! prints it in that format's canonical form (`2Gi` stays `2Gi`, `100G`
//! stays `100G`), as the API server and kube-scheduler write quantities.
//! The format takes no part in comparison: `1Ki == 1024`.
//! [`Quantity::to_decimal_si`] prints the canonical decimal-SI form
//! (`400G`, `25M`, `100m`) that published objects carry.
#![deny(missing_docs)]

mod format;

use std::cmp::Ordering;
use std::fmt;

/// Largest number of significant decimal digits a quantity may carry.
const MAX_DIGITS: u32 = 38;

/// An exact Kubernetes quantity.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    /// Significant digits, with trailing zeros moved into `exponent`.
    mantissa: i128,
    /// Power of ten the mantissa is scaled by.
    exponent: i32,
    /// How it is written (not part of its value).
    format: Format,
}

/// How a quantity is written, as `resource.Format` in Kubernetes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// Decimal suffixes (`k`, `M`, `G`, `m`, …) or none.
    #[default]
    DecimalSi,
    /// Binary suffixes (`Ki`, `Mi`, `Gi`, …).
    BinarySi,
    /// An exponent (`1e3`, `5E-3`).
    DecimalExponent,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Quantity) -> bool {
        self.mantissa == other.mantissa && self.exponent == other.exponent
    }
}

impl Eq for Quantity {}

impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.mantissa.hash(state);
        self.exponent.hash(state);
    }
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string does not follow the quantity grammar.
    #[error("quantity {input:?} is not valid: {reason}")]
    Syntax {
        /// The rejected text.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The value needs more precision or range than a quantity holds.
    #[error("quantity arithmetic overflowed")]
    Overflow,
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity {
        mantissa: 0,
        exponent: 0,
        format: Format::DecimalSi,
    };

    /// The quantity `value`, a whole number.
    pub fn from_int(value: i64) -> Quantity {
        Quantity::normalized(i128::from(value), 0)
    }

    /// The quantity `value`, a whole non-negative number (a bandwidth, a count).
    pub fn from_u64(value: u64) -> Quantity {
        Quantity::normalized(i128::from(value), 0)
    }

    /// Parses the Kubernetes quantity syntax, e.g. `400G`, `1.5Gi`, `100m`, `1e3`.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let syntax = |reason| QuantityError::Syntax {
            input: input.to_owned(),
            reason,
        };
        if input.is_empty() {
            return Err(syntax("empty"));
        }
        let (number, suffix) = split_number(input);
        let (negative, digits) = match number.as_bytes().first() {
            Some(b'-') => (true, &number[1..]),
            Some(b'+') => (false, &number[1..]),
            _ => (false, number),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(syntax("no digits"));
        }
        if !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err(syntax("bad digits"));
        }
        let mut mantissa: i128 = 0;
        let mut significant = 0u32;
        for b in whole.bytes().chain(fraction.bytes()) {
            if significant > 0 || b != b'0' {
                significant += 1;
            }
            if significant > MAX_DIGITS {
                return Err(syntax("too many significant digits"));
            }
            mantissa = mantissa * 10 + i128::from(b - b'0');
        }
        let fraction_len = i32::try_from(fraction.len()).map_err(|_| syntax("too long"))?;
        let (base, power) = parse_suffix(suffix).ok_or_else(|| syntax("unknown suffix"))?;
        if negative {
            mantissa = -mantissa;
        }
        let value = Quantity::normalized(mantissa, -fraction_len);
        let scaled = if base == 2 {
            value.mul_pow2(power)
        } else {
            value.mul_pow10(power)
        };
        let format = if base == 2 {
            Format::BinarySi
        } else if suffix.starts_with(['e', 'E']) {
            Format::DecimalExponent
        } else {
            Format::DecimalSi
        };
        scaled
            .map(|q| q.with_format(format))
            .ok_or_else(|| syntax("out of range"))
    }

    /// The format it is written in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The same value, written in `format`.
    pub fn with_format(mut self, format: Format) -> Quantity {
        self.format = format;
        self
    }

    fn normalized(mut mantissa: i128, mut exponent: i32) -> Quantity {
        if mantissa == 0 {
            return Quantity::ZERO;
        }
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        Quantity {
            mantissa,
            exponent,
            format: Format::DecimalSi,
        }
    }

    fn mul_pow10(self, power: i32) -> Option<Quantity> {
        let exponent = self.exponent.checked_add(power)?;
        Some(Quantity::normalized(self.mantissa, exponent))
    }

    fn mul_pow2(self, power: i32) -> Option<Quantity> {
        let factor = 1i128.checked_shl(u32::try_from(power).ok()?)?;
        let mantissa = self.mantissa.checked_mul(factor)?;
        (digit_count(mantissa) <= MAX_DIGITS).then(|| Quantity::normalized(mantissa, self.exponent))
    }

    /// -1, 0 or 1 as the quantity is negative, zero or positive.
    pub fn sign(&self) -> i64 {
        self.mantissa.signum() as i64
    }

    /// Whether the quantity is a whole number.
    pub fn is_integer(&self) -> bool {
        self.exponent >= 0
    }

    /// The quantity as an `i64`, when it is a whole number that fits.
    pub fn as_i64(&self) -> Option<i64> {
        if !self.is_integer() {
            return None;
        }
        let factor = 10i128.checked_pow(u32::try_from(self.exponent).ok()?)?;
        i64::try_from(self.mantissa.checked_mul(factor)?).ok()
    }

    /// The nearest `f64`.
    pub fn as_f64(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exponent)
    }

    /// `self + other`, exactly, in `self`'s format (`other`'s when `self`
    /// is zero), as `Quantity.Add` does.
    pub fn checked_add(&self, other: &Quantity) -> Result<Quantity, QuantityError> {
        let (a, b, exponent) = align(self, other).ok_or(QuantityError::Overflow)?;
        let sum = a.checked_add(b).ok_or(QuantityError::Overflow)?;
        if digit_count(sum) > MAX_DIGITS {
            return Err(QuantityError::Overflow);
        }
        let format = if self.mantissa == 0 {
            other.format
        } else {
            self.format
        };
        Ok(Quantity::normalized(sum, exponent).with_format(format))
    }

    /// `self - other`, exactly, formatted as [`checked_add`](Self::checked_add).
    pub fn checked_sub(&self, other: &Quantity) -> Result<Quantity, QuantityError> {
        self.checked_add(&Quantity {
            mantissa: -other.mantissa,
            exponent: other.exponent,
            format: other.format,
        })
    }

    /// Rounds `self` up to `min + n × step` (the smallest such value not
    /// below `self`, `n ≥ 0`); `None` on overflow or a non-positive step.
    pub fn round_up_to_step(&self, min: &Quantity, step: &Quantity) -> Option<Quantity> {
        if step.sign() <= 0 {
            return None;
        }
        let diff = self.checked_sub(min).ok()?;
        let (d, s, exponent) = align(&diff, step)?;
        let n = if d <= 0 { 0 } else { (d + s - 1) / s };
        let value = Quantity::normalized(n.checked_mul(s)?, exponent);
        min.checked_add(&value).ok()
    }

    /// Whether `self - min` is a whole multiple of `step`.
    pub fn is_step_of(&self, min: &Quantity, step: &Quantity) -> bool {
        let Ok(diff) = self.checked_sub(min) else {
            return false;
        };
        match align(&diff, step) {
            Some((d, s, _)) if s != 0 => d % s == 0,
            _ => false,
        }
    }

    /// Rounds `self × 1000` up to a whole number, as `Quantity.MilliValue()` does.
    pub fn ceil_milli_i128(&self) -> Option<i128> {
        Quantity::normalized(self.mantissa, self.exponent.checked_add(3)?).ceil_i128()
    }

    /// The quantity `milli / 1000`.
    pub fn from_milli(milli: i128) -> Option<Quantity> {
        (digit_count(milli) <= MAX_DIGITS).then(|| Quantity::normalized(milli, -3))
    }

    /// The quantity `value`, when it has at most 38 digits.
    pub fn from_i128(value: i128) -> Option<Quantity> {
        (digit_count(value) <= MAX_DIGITS).then(|| Quantity::normalized(value, 0))
    }

    /// Rounds up to the nearest whole number (`ceil`), as `Quantity.Value()` does.
    pub fn ceil_i128(&self) -> Option<i128> {
        if self.exponent >= 0 {
            let factor = 10i128.checked_pow(u32::try_from(self.exponent).ok()?)?;
            return self.mantissa.checked_mul(factor);
        }
        let divisor = 10i128.checked_pow(self.exponent.unsigned_abs())?;
        let quotient = self.mantissa / divisor;
        Some(if self.mantissa % divisor > 0 {
            quotient + 1
        } else {
            quotient
        })
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        let sign = self.mantissa.signum().cmp(&other.mantissa.signum());
        if sign != Ordering::Equal || self.mantissa == 0 {
            return sign;
        }
        // Same sign, both non-zero: compare orders of magnitude first.
        let magnitude = |q: &Quantity| i64::from(q.exponent) + i64::from(digit_count(q.mantissa));
        let by_magnitude = magnitude(self).cmp(&magnitude(other));
        let by_magnitude = if self.mantissa < 0 {
            by_magnitude.reverse()
        } else {
            by_magnitude
        };
        if by_magnitude != Ordering::Equal {
            return by_magnitude;
        }
        match align(self, other) {
            Some((a, b, _)) => a.cmp(&b),
            None => Ordering::Equal,
        }
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Quantity {
    /// Canonical-ish form: a plain decimal number without suffix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !(-40..=18).contains(&self.exponent) {
            return write!(f, "{}e{}", self.mantissa, self.exponent);
        }
        if self.exponent >= 0 {
            write!(f, "{}", self.mantissa)?;
            for _ in 0..self.exponent {
                f.write_str("0")?;
            }
            return Ok(());
        }
        let digits = self.mantissa.unsigned_abs().to_string();
        let point = digits.len() as i64 + i64::from(self.exponent);
        let sign = if self.mantissa < 0 { "-" } else { "" };
        if point > 0 {
            let (whole, fraction) = digits.split_at(point as usize);
            write!(f, "{sign}{whole}.{fraction}")
        } else {
            let zeros = "0".repeat(point.unsigned_abs() as usize);
            write!(f, "{sign}0.{zeros}{digits}")
        }
    }
}

/// Both mantissas at the smaller exponent, when that fits.
fn align(a: &Quantity, b: &Quantity) -> Option<(i128, i128, i32)> {
    let exponent = a.exponent.min(b.exponent);
    let scale = |q: &Quantity| {
        let shift = u32::try_from(q.exponent - exponent).ok()?;
        q.mantissa.checked_mul(10i128.checked_pow(shift)?)
    };
    Some((scale(a)?, scale(b)?, exponent))
}

fn digit_count(value: i128) -> u32 {
    value.unsigned_abs().checked_ilog10().map_or(1, |d| d + 1)
}

/// Splits `1.5Gi` into `1.5` and `Gi`.
fn split_number(input: &str) -> (&str, &str) {
    let end = input
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '+' || c == '-') && i == 0)))
        .map_or(input.len(), |(i, _)| i);
    input.split_at(end)
}

/// The base and power a suffix multiplies by.
fn parse_suffix(suffix: &str) -> Option<(u32, i32)> {
    let decimal = |power| Some((10, power));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => Some((2, 10)),
        "Mi" => Some((2, 20)),
        "Gi" => Some((2, 30)),
        "Ti" => Some((2, 40)),
        "Pi" => Some((2, 50)),
        "Ei" => Some((2, 60)),
        _ => parse_exponent(suffix),
    }
}

fn parse_exponent(suffix: &str) -> Option<(u32, i32)> {
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 6 {
        return None;
    }
    Some((10, rest.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn suffixes_scale_the_number() {
        assert_eq!(q("400G"), q("400000M"));
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1.5Gi"), q("1610612736"));
        assert_eq!(q("100m"), q("0.1"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("2E-3"), q("2m"));
        assert_eq!(q("1E"), q("1e18"));
    }

    #[test]
    fn comparison_is_exact_across_scales() {
        assert!(q("1") > q("999m"));
        assert!(q("-1") < q("-999m"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("0") < q("1n"));
        assert_eq!(q("0.000"), Quantity::ZERO);
        assert!(q("123456789012345678901234567") > q("123456789012345678901234566"));
    }

    #[test]
    fn arithmetic_and_conversions() {
        assert_eq!(q("1.5").checked_add(&q("500m")).unwrap(), q("2"));
        assert_eq!(q("1G").checked_sub(&q("1Gi")).unwrap().sign(), -1);
        assert_eq!(q("2k").as_i64(), Some(2000));
        assert_eq!(q("1.5").as_i64(), None);
        assert_eq!(q("1.5").ceil_i128(), Some(2));
        assert_eq!(q("-1.5").ceil_i128(), Some(-1));
        assert_eq!(q("250m").ceil_milli_i128(), Some(250));
        assert_eq!(
            q("0.0001").ceil_milli_i128(),
            Some(1),
            "rounded up as MilliValue()"
        );
        assert_eq!(Quantity::from_milli(1500), Some(q("1.5")));
        assert_eq!(Quantity::from_i128(7), Some(q("7")));
        assert!((q("1.25").as_f64() - 1.25).abs() < 1e-12);
        assert_eq!(q("1.5Ki").to_string(), "1536");
        assert_eq!(q("-0.05").to_string(), "-0.05");
        assert_eq!(q("3e40").to_string(), "3e40");
        assert_eq!(Quantity::parse(&q("3e40").to_string()).unwrap(), q("3e40"));
        assert_eq!(
            q("11G").round_up_to_step(&q("10G"), &q("4G")),
            Some(q("14G"))
        );
        assert_eq!(
            q("1G").round_up_to_step(&q("10G"), &q("4G")),
            Some(q("10G"))
        );
        assert!(q("18G").is_step_of(&q("10G"), &q("4G")));
        assert!(!q("17G").is_step_of(&q("10G"), &q("4G")));
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for bad in [
            "",
            "G",
            "1.2.3",
            "1Kb",
            "1e",
            "--1",
            "1 G",
            "0x10",
            "1e1000000",
            "1Gb",
            "abc",
            "1ee3",
            "+-1",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
