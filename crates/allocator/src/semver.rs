//! Semantic versions (semver 2.0.0) as the DRA `version` attribute and the
//! CEL `semver()` functions use them: strict parsing (no leading zeros, no
//! `v` prefix) with an optional normalizing mode, and precedence order.

use std::cmp::Ordering;

/// A parsed semantic version. Build metadata is kept but never compared.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Semver {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
    /// Dot-separated pre-release identifiers (`rc.1` → `["rc", "1"]`).
    pub pre: Vec<String>,
    /// Build metadata after `+`.
    pub build: String,
}

/// Why a string is not a semantic version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version {input:?} is not a semantic version: {reason}")]
pub struct SemverError {
    /// The rejected text.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Semver {
    /// Parses a strict semver 2.0.0 string, e.g. `1.2.3-rc.1+build.5`.
    pub fn parse(input: &str) -> Result<Semver, SemverError> {
        let error = |reason| SemverError {
            input: input.to_owned(),
            reason,
        };
        let (rest, build) = input.split_once('+').unwrap_or((input, ""));
        if input.contains('+') && !valid_identifiers(build, false) {
            return Err(error("bad build metadata"));
        }
        let (core, pre) = rest.split_once('-').unwrap_or((rest, ""));
        if rest.contains('-') && !valid_identifiers(pre, true) {
            return Err(error("bad pre-release"));
        }
        let parts: Vec<&str> = core.split('.').collect();
        let [major, minor, patch] = parts.as_slice() else {
            return Err(error("needs major.minor.patch"));
        };
        let number = |s: &str| parse_number(s).ok_or_else(|| error("bad version number"));
        Ok(Semver {
            major: number(major)?,
            minor: number(minor)?,
            patch: number(patch)?,
            pre: if pre.is_empty() {
                Vec::new()
            } else {
                pre.split('.').map(str::to_owned).collect()
            },
            build: build.to_owned(),
        })
    }

    /// Parses leniently, as `semver(s, true)` does: a leading `v`, missing
    /// minor/patch parts and leading zeros are accepted.
    pub fn parse_normalized(input: &str) -> Result<Semver, SemverError> {
        let trimmed = input.strip_prefix('v').unwrap_or(input);
        let split = trimmed.find(['-', '+']).unwrap_or(trimmed.len());
        let (core, tail) = trimmed.split_at(split);
        let mut parts: Vec<String> = core
            .split('.')
            .map(|p| {
                let stripped = p.trim_start_matches('0');
                if stripped.is_empty() && !p.is_empty() {
                    "0".to_owned()
                } else {
                    stripped.to_owned()
                }
            })
            .collect();
        while parts.len() < 3 {
            parts.push("0".to_owned());
        }
        Semver::parse(&format!("{}{tail}", parts.join("."))).map_err(|e| SemverError {
            input: input.to_owned(),
            ..e
        })
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Semver) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| compare_pre(&self.pre, &other.pre))
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Semver) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn parse_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

fn valid_identifiers(s: &str, numeric_no_leading_zero: bool) -> bool {
    s.split('.').all(|id| {
        !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !(numeric_no_leading_zero
                && id.bytes().all(|b| b.is_ascii_digit())
                && id.len() > 1
                && id.starts_with('0'))
    })
}

/// Pre-release precedence: a version without pre-release ranks higher;
/// numeric identifiers compare numerically and rank below alphanumeric ones.
fn compare_pre(a: &[String], b: &[String]) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    for (x, y) in a.iter().zip(b) {
        let order = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            (Ok(_), Err(_)) => Ordering::Less,
            (Err(_), Ok(_)) => Ordering::Greater,
            (Err(_), Err(_)) => x.cmp(y),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Semver {
        Semver::parse(s).unwrap()
    }

    #[test]
    fn precedence_follows_semver_2() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.2.0",
            "1.10.0",
        ];
        for pair in ordered.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(v("1.0.0+a").cmp(&v("1.0.0+b")), Ordering::Equal);
    }

    #[test]
    fn strict_parsing_rejects_sloppy_versions() {
        for bad in [
            "1.2", "v1.2.3", "01.2.3", "1.2.3-01", "1.2.3-", "1.2.3+", "a.b.c", "",
        ] {
            assert!(Semver::parse(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(v("1.2.3-rc.1+build.5").pre, ["rc", "1"]);
    }

    #[test]
    fn normalizing_parse_fills_in() {
        assert_eq!(Semver::parse_normalized("v1.02").unwrap(), v("1.2.0"));
        assert_eq!(Semver::parse_normalized("3").unwrap(), v("3.0.0"));
    }
}
