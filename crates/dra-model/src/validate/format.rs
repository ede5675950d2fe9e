//! Name and value formats of the Kubernetes API, as predicates.
//!
//! Written from the API's documented rules (RFC 1123 labels and
//! subdomains, C identifiers, qualified names, label values, semver 2.0.0),
//! independent of the slice builder so the validator can check it.

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label_part)
}

/// A subdomain part: like a label but without the 63 limit of its own
/// (the subdomain rule only limits the whole).
fn is_dns_label_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// C identifier of at most 32 characters: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_c_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A driver (CSI-style) name: a DNS subdomain of at most 63 characters.
pub fn is_driver_name(s: &str) -> bool {
    s.len() <= 63 && is_dns_subdomain(s)
}

/// Attribute or capacity name: `<C identifier>` or `<domain>/<C identifier>`
/// with the domain a valid driver name.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        None => is_c_identifier(s),
        Some((domain, id)) => !id.contains('/') && is_driver_name(domain) && is_c_identifier(id),
    }
}

/// Label/taint key: optional DNS-subdomain prefix (≤253) and `/`, then a
/// name of ≤63 characters `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain)
        && !name.is_empty()
        && name.len() <= 63
        && is_label_text(name)
}

/// Label value: empty, or ≤63 characters of the label-name alphabet.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || (s.len() <= 63 && is_label_text(s))
}

fn is_label_text(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Semantic version 2.0.0 (`1.2.3`, `1.2.3-rc.1+build.5`).
pub fn is_semver(s: &str) -> bool {
    let (rest, build) = match s.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |p: &str| {
        !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) && (p == "0" || !p.starts_with('0'))
    };
    let ident =
        |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
    let core_ok = {
        let parts: Vec<&str> = core.split('.').collect();
        parts.len() == 3 && parts.iter().all(|p| numeric(p))
    };
    let pre_ok = pre.is_none_or(|p| {
        p.split('.')
            .all(|id| ident(id) && (!id.bytes().all(|c| c.is_ascii_digit()) || numeric(id)))
    });
    let build_ok = build.is_none_or(|b| b.split('.').all(ident));
    core_ok && pre_ok && build_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(is_dns_label("pf-0000-0c-00-0"));
        assert!(!is_dns_label("Pf"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("node-a-ainic.amd.com-0"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("a_b"));
    }

    #[test]
    fn qualified_names() {
        assert!(is_qualified_name("ainic.amd.com/pciVendorID"));
        assert!(is_qualified_name("resource.kubernetes.io/pcieRoot"));
        assert!(is_qualified_name("rail"));
        assert!(!is_qualified_name("ainic.amd.com/pci-vendor"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("/rail"));
        assert!(!is_qualified_name(&format!("x/{}", "a".repeat(33))));
    }

    #[test]
    fn label_keys_and_values() {
        assert!(is_label_key("ainic.amd.com/unhealthy"));
        assert!(!is_label_key("ainic.amd.com/"));
        assert!(is_label_value("link-down"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-x"));
    }

    #[test]
    fn semver() {
        for ok in [
            "1.2.3",
            "0.0.0",
            "1.2.3-rc.1",
            "1.2.3+b.5",
            "10.20.30-alpha-1",
        ] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in ["1.2", "01.2.3", "1.2.3-", "1.2.3-01", "v1.2.3", "1.2.3.4"] {
            assert!(!is_semver(bad), "{bad}");
        }
    }
}
