//! Parsers for the text formats of sysfs attribute files.
//!
//! Each takes the raw file content and returns `Ok(Some(value))`, `Ok(None)`
//! when the file says "unknown" in its own way (`-1`, `Unknown`, empty), or
//! `Err(reason)` for garbage. None of them panics on any input.

/// What a parser returns: a value, an explicit "unknown", or why it is garbage.
pub(crate) type Parsed<T> = Result<Option<T>, String>;

fn hex(raw: &str, max_digits: usize) -> Result<u32, String> {
    let t = raw.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if digits.is_empty() || digits.len() > max_digits {
        return Err(format!("expected up to {max_digits} hex digits"));
    }
    u32::from_str_radix(digits, 16).map_err(|_| "not a hex number".to_string())
}

/// A 16-bit ID such as `vendor` (`0x1dd8`).
pub(crate) fn hex_u16(raw: &str) -> Parsed<u16> {
    hex(raw, 4).map(|v| Some(v as u16))
}

/// The 24-bit `class` code (`0x020000`).
pub(crate) fn class_code(raw: &str) -> Parsed<u32> {
    hex(raw, 6).map(Some)
}

/// An unsigned decimal number (`mtu`, `sriov_totalvfs`, `port`).
pub(crate) fn decimal(raw: &str) -> Parsed<u32> {
    raw.trim()
        .parse()
        .map(Some)
        .map_err(|_| "not an unsigned number".to_string())
}

/// `numa_node`: `-1` means unknown.
pub(crate) fn numa_node(raw: &str) -> Parsed<u32> {
    match raw.trim() {
        "-1" => Ok(None),
        t => t
            .parse()
            .map(Some)
            .map_err(|_| "not a NUMA node number".to_string()),
    }
}

/// `current_link_speed` (`32.0 GT/s PCIe`) to the GT/s figure (`32.0`).
pub(crate) fn link_speed(raw: &str) -> Parsed<String> {
    let t = raw.trim();
    if t.is_empty() || t.starts_with("Unknown") {
        return Ok(None);
    }
    let figure = t.split_whitespace().next().unwrap_or_default();
    match figure.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && t[figure.len()..].trim_start().starts_with("GT/s") => {
            Ok(Some(figure.to_string()))
        }
        _ => Err("expected \"<rate> GT/s\"".to_string()),
    }
}

/// `current_link_width`: lanes; `0` means unknown (no link).
pub(crate) fn link_width(raw: &str) -> Parsed<u32> {
    Ok(decimal(raw)?.filter(|w| *w > 0))
}

/// `local_cpulist` (`0-47,96-143`).
pub(crate) fn cpu_list(raw: &str) -> Parsed<String> {
    let t = raw.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let ok = t.split(',').all(|range| {
        let mut ends = range.splitn(2, '-');
        ends.all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    if ok {
        Ok(Some(t.to_string()))
    } else {
        Err("expected a CPU list like 0-47,96-143".to_string())
    }
}

/// A netdev `speed` in Mb/s; `-1` (or any negative) means unknown.
pub(crate) fn netdev_speed(raw: &str) -> Parsed<u64> {
    let v: i64 = raw.trim().parse().map_err(|_| "not a number".to_string())?;
    Ok(u64::try_from(v).ok())
}

/// A MAC `address`, lowercased.
pub(crate) fn mac(raw: &str) -> Parsed<String> {
    let t = raw.trim().to_ascii_lowercase();
    let ok = t.split(':').count() >= 6
        && t.split(':')
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok {
        Ok(Some(t))
    } else {
        Err("expected a colon-separated MAC address".to_string())
    }
}

/// Free text (`operstate`, `fw_ver`, `rate`, `link_layer`); empty is unknown.
pub(crate) fn text(raw: &str) -> Parsed<String> {
    let t = raw.trim();
    if t.chars().any(char::is_control) {
        return Err("contains control characters".to_string());
    }
    Ok((!t.is_empty()).then(|| t.to_string()))
}

/// A port `state` / `phys_state` (`4: ACTIVE`) without its number (`ACTIVE`).
pub(crate) fn port_state(raw: &str) -> Parsed<String> {
    let t = raw.trim();
    let name = match t.split_once(':') {
        Some((num, name)) if num.trim().bytes().all(|b| b.is_ascii_digit()) => name,
        Some(_) => return Err("expected \"<number>: <NAME>\"".to_string()),
        None => t,
    };
    text(name)
}

/// A `dev` file (`231:192`) to major and minor numbers.
pub(crate) fn dev_numbers(raw: &str) -> Parsed<(u32, u32)> {
    let (major, minor) = raw
        .trim()
        .split_once(':')
        .ok_or_else(|| "expected <major>:<minor>".to_string())?;
    match (major.parse(), minor.parse()) {
        (Ok(a), Ok(b)) => Ok(Some((a, b))),
        _ => Err("expected <major>:<minor> numbers".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_class() {
        assert_eq!(hex_u16("0x1dd8\n"), Ok(Some(0x1dd8)));
        assert!(hex_u16("0x11dd8").is_err());
        assert!(hex_u16("zz").is_err());
        assert!(hex_u16("").is_err());
        assert_eq!(class_code("0x020000\n"), Ok(Some(0x020000)));
        assert!(class_code("0x1020000").is_err());
    }

    #[test]
    fn numa_and_link() {
        assert_eq!(numa_node("-1\n"), Ok(None));
        assert_eq!(numa_node("1\n"), Ok(Some(1)));
        assert!(numa_node("-2").is_err());
        assert_eq!(link_speed("32.0 GT/s PCIe\n"), Ok(Some("32.0".into())));
        assert_eq!(link_speed("2.5 GT/s\n"), Ok(Some("2.5".into())));
        assert_eq!(link_speed("Unknown speed\n"), Ok(None));
        assert!(link_speed("fast\n").is_err());
        assert!(link_speed("NaN GT/s").is_err());
        assert_eq!(link_width("16\n"), Ok(Some(16)));
        assert_eq!(link_width("0\n"), Ok(None));
        assert!(link_width("x16").is_err());
    }

    #[test]
    fn cpus_mac_speed() {
        assert_eq!(cpu_list("0-47,96-143\n"), Ok(Some("0-47,96-143".into())));
        assert!(cpu_list("0--4").is_err());
        assert_eq!(
            mac("02:AA:00:0c:00:00\n"),
            Ok(Some("02:aa:00:0c:00:00".into()))
        );
        assert!(mac("02:aa").is_err());
        assert_eq!(netdev_speed("400000\n"), Ok(Some(400_000)));
        assert_eq!(netdev_speed("-1\n"), Ok(None));
        assert!(netdev_speed("fast").is_err());
    }

    #[test]
    fn ports_and_devs() {
        assert_eq!(port_state("4: ACTIVE\n"), Ok(Some("ACTIVE".into())));
        assert_eq!(port_state("5: LinkUp\n"), Ok(Some("LinkUp".into())));
        assert_eq!(port_state("DOWN"), Ok(Some("DOWN".into())));
        assert!(port_state("x: y").is_err());
        assert_eq!(dev_numbers("231:192\n"), Ok(Some((231, 192))));
        assert!(dev_numbers("231").is_err());
        assert!(dev_numbers("a:b").is_err());
    }
}
