//! The canonical text of a quantity, as Kubernetes' `CanonicalizeBytes`
//! writes it: decimal SI with the largest decimal suffix that keeps the
//! number whole (`400G`, `25M`, `1500`, `100m`); binary SI with the largest
//! binary suffix that does (`2Gi`, `1536`), falling back to decimal SI for
//! values under 1024 or with a fraction; decimal exponent with an exponent
//! that is a multiple of three (`1e3`, `15e6`).

use crate::{Format, Quantity};

/// Binary suffixes by the power of 1024 they stand for, largest first.
const BINARY: [(u32, &str); 6] = [
    (6, "Ei"),
    (5, "Pi"),
    (4, "Ti"),
    (3, "Gi"),
    (2, "Mi"),
    (1, "Ki"),
];

/// Decimal suffixes by the power of ten they stand for, largest first.
const SUFFIXES: [(i32, &str); 9] = [
    (18, "E"),
    (15, "P"),
    (12, "T"),
    (9, "G"),
    (6, "M"),
    (3, "k"),
    (0, ""),
    (-3, "m"),
    (-6, "u"),
];

/// The smallest power a suffix stands for (`n`).
const NANO: (i32, &str) = (-9, "n");

impl Quantity {
    /// The quantity in its own format's canonical form (see the module docs).
    pub fn canonical(&self) -> String {
        match self.format {
            Format::DecimalSi => self.to_decimal_si(),
            Format::BinarySi => self.to_binary_si().unwrap_or_else(|| self.to_decimal_si()),
            Format::DecimalExponent => self.to_decimal_exponent(),
        }
    }

    /// `2Gi`, `1536`; `None` when binary SI does not apply (a fraction, or
    /// under 1024 in magnitude).
    fn to_binary_si(self) -> Option<String> {
        let whole = self.as_i128_exact()?;
        if whole.unsigned_abs() < 1024 {
            return None;
        }
        for (power, suffix) in BINARY {
            let unit = 1i128 << (10 * power);
            if whole % unit == 0 {
                return Some(format!("{}{suffix}", whole / unit));
            }
        }
        Some(whole.to_string())
    }

    fn as_i128_exact(&self) -> Option<i128> {
        if self.exponent < 0 {
            return None;
        }
        self.mantissa
            .checked_mul(10i128.checked_pow(u32::try_from(self.exponent).ok()?)?)
    }

    /// `1e3`, `15e6`, `5e-3`: the mantissa with an exponent that is a
    /// multiple of three.
    fn to_decimal_exponent(self) -> String {
        if self.mantissa == 0 {
            return "0".to_owned();
        }
        let exponent = self.exponent.div_euclid(3) * 3;
        let zeros = "0".repeat((self.exponent - exponent) as usize);
        if exponent == 0 {
            format!("{}{zeros}", self.mantissa)
        } else {
            format!("{}{zeros}e{exponent}", self.mantissa)
        }
    }

    /// The quantity as a whole number followed by the largest decimal-SI
    /// suffix that keeps it whole: `400000000000` → `400G`, `1500` →
    /// `1500`, `0.1` → `100m`, `0` → `0`. Values finer than a nano-unit
    /// have no such form and print as plain decimals (see `Display`).
    pub fn to_decimal_si(&self) -> String {
        if self.mantissa == 0 {
            return "0".to_owned();
        }
        let (power, suffix) = SUFFIXES
            .into_iter()
            .find(|&(power, _)| power <= self.exponent)
            .unwrap_or(NANO);
        if self.exponent < power {
            return self.to_string();
        }
        let zeros = "0".repeat((self.exponent - power) as usize);
        format!("{}{zeros}{suffix}", self.mantissa)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn si(text: &str) -> String {
        Quantity::parse(text).unwrap().to_decimal_si()
    }

    #[test]
    fn whole_numbers_take_the_largest_exact_suffix() {
        assert_eq!(Quantity::from_u64(400_000_000_000).to_decimal_si(), "400G");
        assert_eq!(Quantity::from_u64(25_000_000_000).to_decimal_si(), "25G");
        assert_eq!(Quantity::from_u64(100_000_000).to_decimal_si(), "100M");
        assert_eq!(Quantity::from_u64(1_500).to_decimal_si(), "1500");
        assert_eq!(Quantity::from_u64(7_000).to_decimal_si(), "7k");
        assert_eq!(Quantity::from_u64(123).to_decimal_si(), "123");
        assert_eq!(Quantity::from_u64(0).to_decimal_si(), "0");
        assert_eq!(
            Quantity::from_u64(u64::MAX).to_decimal_si(),
            u64::MAX.to_string()
        );
        assert_eq!(si("1e21"), "1000E");
        assert_eq!(si("-2Gi"), "-2147483648");
        assert_eq!(si("-3000"), "-3k");
    }

    #[test]
    fn fractions_take_sub_unit_suffixes() {
        assert_eq!(si("0.1"), "100m");
        assert_eq!(si("1.5"), "1500m");
        assert_eq!(si("2.5u"), "2500n");
        assert_eq!(si("1n"), "1n");
        assert_eq!(si("1e-10"), "0.0000000001");
    }

    fn canonical(text: &str) -> String {
        Quantity::parse(text).unwrap().canonical()
    }

    #[test]
    fn each_format_keeps_its_own_canonical_form() {
        assert_eq!(canonical("2Gi"), "2Gi");
        assert_eq!(canonical("2048Mi"), "2Gi");
        assert_eq!(canonical("1.5Ki"), "1536");
        assert_eq!(canonical("0.5Ki"), "512");
        assert_eq!(canonical("100G"), "100G");
        assert_eq!(canonical("100000M"), "100G");
        assert_eq!(canonical("1e3"), "1e3");
        assert_eq!(canonical("1500e0"), "1500");
        assert_eq!(canonical("15e5"), "1500e3");
        assert_eq!(canonical("5e-3"), "5e-3");
    }

    #[test]
    fn sums_keep_the_first_non_zero_format() {
        let gi = Quantity::parse("1Gi").unwrap();
        let sum = Quantity::ZERO
            .checked_add(&gi)
            .unwrap()
            .checked_add(&gi)
            .unwrap();
        assert_eq!(sum.canonical(), "2Gi");
        let mixed = Quantity::parse("1G").unwrap().checked_add(&gi).unwrap();
        assert_eq!(mixed.format(), Format::DecimalSi);
    }

    #[test]
    fn the_text_parses_back_to_the_same_value() {
        for text in ["400G", "123", "7k", "1Ti", "0.25", "3e40", "-1.5m", "1e-12"] {
            let value = Quantity::parse(text).unwrap();
            assert_eq!(
                Quantity::parse(&value.to_decimal_si()).unwrap(),
                value,
                "{text}"
            );
        }
    }
}
