//! The canonical decimal-SI text of a quantity: the number with the
//! largest decimal suffix that keeps it a whole number (`400G`, `25M`,
//! `1500`, `100m`), as Kubernetes prints quantities in the decimal format.

use crate::Quantity;

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
