//! Network interfaces of a function: `net/<ifname>/{address,mtu,speed,operstate}`.

use crate::model::Netdev;
use crate::sysfs::{Backend, EntryKind, parse};

use super::function::Function;
use super::reader::{IfMissing, Reader};

/// The netdevs of `f`, by name; empty when it has none (no driver bound).
pub(crate) fn netdevs<B: Backend>(r: &mut Reader<'_, B>, f: &Function) -> Vec<Netdev> {
    let who = f.who();
    let net = format!("{}/net", f.dir);
    // Listed first: a missing `net` (no driver bound) is the rare case.
    let entries = match r.fs.list(&net) {
        Ok(entries) => entries,
        Err(_) if !r.fs.exists(&net) => return Vec::new(),
        Err(e) => {
            r.warn(&who, format!("cannot list net: {e}"));
            return Vec::new();
        }
    };
    entries
        .into_iter()
        .filter(|(_, kind)| matches!(kind, EntryKind::Dir | EntryKind::Symlink))
        .map(|(name, _)| netdev(r, f, name))
        .collect()
}

/// The netdev `name` of `f`: `net/<name>/{address,mtu,speed,operstate}`.
pub(crate) fn netdev<B: Backend>(r: &mut Reader<'_, B>, f: &Function, name: String) -> Netdev {
    let who = f.who();
    let file = |attr: &str| format!("net/{name}/{attr}");
    Netdev {
        mac: r.field(&who, &f.dir, &file("address"), parse::mac, IfMissing::Warn),
        mtu: r.field(&who, &f.dir, &file("mtu"), parse::decimal, IfMissing::Warn),
        // The kernel fails reads of `speed` while the link is down.
        speed_mbps: r.field(
            &who,
            &f.dir,
            &file("speed"),
            parse::netdev_speed,
            IfMissing::Quiet,
        ),
        operstate: r.field(
            &who,
            &f.dir,
            &file("operstate"),
            parse::text,
            IfMissing::Warn,
        ),
        name,
    }
}
