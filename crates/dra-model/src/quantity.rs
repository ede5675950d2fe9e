//! Kubernetes resource quantities (`400G`, `1Gi`, `100m`) as exact numbers.
//!
//! The builder formats bandwidths and counts; the validator compares
//! request-policy bounds against capacities. Both need the value of a
//! quantity string, so this module parses the upstream grammar
//! (`<sign><digits>[.<digits>]<suffix>`, suffixes: binary `Ki…Ei`, decimal
//! `n u m "" k M G T P E`, or an exponent `e<N>`) into thousandths, exact
//! for every value a NIC can have.

use std::cmp::Ordering;

/// A parsed quantity, in thousandths of the unit (milli-units), so that
/// `100m` and `400G` are both exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuantityValue {
    /// The value times 1000, rounded up when finer than a thousandth.
    pub millis: i128,
}

/// Why a string is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid quantity {input:?}: expected a number with an optional suffix such as 400G, 1Gi or 100m"
)]
pub struct ParseQuantityError {
    /// The text that failed to parse.
    pub input: String,
}

impl QuantityValue {
    /// Whole units (rounded toward zero).
    pub fn units(self) -> i128 {
        self.millis / 1000
    }

    /// Compares two quantities by value.
    pub fn cmp_value(self, other: QuantityValue) -> Ordering {
        self.millis.cmp(&other.millis)
    }
}

/// Parses a quantity string.
pub fn parse_quantity(text: &str) -> Result<QuantityValue, ParseQuantityError> {
    let err = || ParseQuantityError {
        input: text.to_string(),
    };
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(err());
    }
    let (multiplier, exponent10) = suffix_scale(suffix).ok_or_else(err)?;
    // digits as an integer, with the decimal point moved into exponent10.
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(err());
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err())?
    };
    // value = mantissa * multiplier * 10^(exponent10 - len(fraction)); in millis: +3.
    let exp = exponent10 - fraction.len() as i32 + 3;
    let scaled = mantissa.checked_mul(multiplier).ok_or_else(err)?;
    let millis = if exp >= 0 {
        10i128
            .checked_pow(exp as u32)
            .and_then(|p| scaled.checked_mul(p))
            .ok_or_else(err)?
    } else {
        let div = 10i128.checked_pow((-exp) as u32).ok_or_else(err)?;
        (scaled + div - 1) / div
    };
    Ok(QuantityValue {
        millis: if negative { -millis } else { millis },
    })
}

/// (binary multiplier, decimal exponent) of a suffix.
fn suffix_scale(suffix: &str) -> Option<(i128, i32)> {
    let binary = |p: u32| Some((1i128 << (10 * p), 0));
    match suffix {
        "" => Some((1, 0)),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => Some((1, -9)),
        "u" => Some((1, -6)),
        "m" => Some((1, -3)),
        "k" => Some((1, 3)),
        "M" => Some((1, 6)),
        "G" => Some((1, 9)),
        "T" => Some((1, 12)),
        "P" => Some((1, 15)),
        "E" => Some((1, 18)),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            let valid = !exp.is_empty()
                && exp
                    .trim_start_matches(['+', '-'])
                    .bytes()
                    .all(|b| b.is_ascii_digit());
            if !valid {
                return None;
            }
            Some((1, exp.parse().ok().filter(|e: &i32| e.abs() <= 30)?))
        }
    }
}

/// A count of bits per second (or any non-negative integer) as a canonical
/// decimal-SI quantity: `400000000000` → `400G`, `25000000` → `25M`.
pub fn format_decimal(value: u64) -> String {
    const SUFFIXES: [(u64, &str); 6] = [
        (1_000_000_000_000_000_000, "E"),
        (1_000_000_000_000_000, "P"),
        (1_000_000_000_000, "T"),
        (1_000_000_000, "G"),
        (1_000_000, "M"),
        (1_000, "k"),
    ];
    for (scale, suffix) in SUFFIXES {
        if value >= scale && value.is_multiple_of(scale) {
            return format!("{}{suffix}", value / scale);
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(s: &str) -> i128 {
        parse_quantity(s).unwrap().units()
    }

    #[test]
    fn parses_suffixes() {
        assert_eq!(units("400G"), 400_000_000_000);
        assert_eq!(units("1Gi"), 1 << 30);
        assert_eq!(units("1.5k"), 1500);
        assert_eq!(units("2e3"), 2000);
        assert_eq!(units("128"), 128);
        assert_eq!(parse_quantity("100m").unwrap().millis, 100);
        assert_eq!(parse_quantity("-1").unwrap().millis, -1000);
        assert_eq!(parse_quantity("1n").unwrap().millis, 1, "rounds up");
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "G", "1.2.3", "4 G", "1Gb", "1e", "abc", "1ee3"] {
            assert!(parse_quantity(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn formats_canonical_decimal() {
        assert_eq!(format_decimal(400_000_000_000), "400G");
        assert_eq!(format_decimal(25_000_000_000), "25G");
        assert_eq!(format_decimal(100_000_000), "100M");
        assert_eq!(format_decimal(1_500), "1500");
        assert_eq!(format_decimal(0), "0");
        for v in [400_000_000_000u64, 123, 7_000, 1_000_000_000_000] {
            assert_eq!(units(&format_decimal(v)), v as i128);
        }
    }
}
