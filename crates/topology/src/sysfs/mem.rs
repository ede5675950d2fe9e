//! An in-memory [`Backend`] for unit tests: a map of paths to directories,
//! files and symlinks, built with a few chained calls.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use super::backend::{Backend, EntryKind};

#[derive(Clone, Debug)]
enum Node {
    Dir,
    File(String),
    Link(String),
}

/// A sysfs tree held in memory. Parent directories are created implicitly.
#[derive(Clone, Debug, Default)]
pub struct MemBackend {
    nodes: BTreeMap<String, Node>,
}

impl MemBackend {
    /// An empty tree (only the root exists).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a directory at `path`.
    pub fn dir(mut self, path: &str) -> Self {
        self.insert(path, Node::Dir);
        self
    }

    /// Adds a regular file at `path` with `content`.
    pub fn file(mut self, path: &str, content: &str) -> Self {
        self.insert(path, Node::File(content.to_string()));
        self
    }

    /// Adds a symlink at `path` whose target text is `target`.
    pub fn link(mut self, path: &str, target: &str) -> Self {
        self.insert(path, Node::Link(target.to_string()));
        self
    }

    fn insert(&mut self, path: &str, node: Node) {
        let path = path.trim_matches('/');
        let mut prefix = String::new();
        for comp in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, p)| p)
        {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(comp);
            self.nodes.entry(prefix.clone()).or_insert(Node::Dir);
        }
        self.nodes.insert(path.to_string(), node);
    }

    fn get(&self, path: &str) -> io::Result<&Node> {
        self.nodes
            .get(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, path.to_string()))
    }
}

fn wrong(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, path.to_string())
}

impl Backend for MemBackend {
    fn kind(&self, path: &str) -> io::Result<EntryKind> {
        if path.is_empty() {
            return Ok(EntryKind::Dir);
        }
        Ok(match self.get(path)? {
            Node::Dir => EntryKind::Dir,
            Node::File(_) => EntryKind::File,
            Node::Link(_) => EntryKind::Symlink,
        })
    }

    fn list(&self, path: &str) -> io::Result<Vec<(String, EntryKind)>> {
        if !path.is_empty() && !matches!(self.get(path)?, Node::Dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                path.to_string(),
            ));
        }
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        Ok(self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| {
                let name = &k[prefix.len()..];
                (!name.contains('/')).then(|| (name.to_string(), self.kind(k).ok()))
            })
            .filter_map(|(n, k)| Some((n, k?)))
            .collect())
    }

    fn read_link(&self, path: &str) -> io::Result<PathBuf> {
        match self.get(path)? {
            Node::Link(t) => Ok(PathBuf::from(t)),
            _ => Err(wrong(path)),
        }
    }

    fn read_file(&self, path: &str) -> io::Result<Option<String>> {
        match self.get(path)? {
            Node::File(c) => Ok(Some(c.clone())),
            Node::Link(_) => Ok(None),
            Node::Dir => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                path.to_string(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EntryKind, FsError, Sysfs};
    use super::*;

    fn tree() -> Sysfs<MemBackend> {
        Sysfs::new(
            MemBackend::new()
                .file("devices/pci0000:00/0000:00:01.0/vendor", "0x1dd8\n")
                .link(
                    "bus/pci/devices/0000:00:01.0",
                    "../../../devices/pci0000:00/0000:00:01.0",
                )
                .link(
                    "bus/pci/devices/dangling",
                    "../../../devices/pci0000:00/0000:99:00.0",
                )
                .link("bus/pci/devices/escape", "../../../../etc")
                .link("bus/pci/devices/absolute", "/etc/passwd")
                .link("bus/pci/devices/loop-a", "loop-b")
                .link("bus/pci/devices/loop-b", "./loop-a")
                .link(
                    "devices/pci0000:00/0000:00:01.0/self",
                    "../0000:00:01.0/self",
                ),
        )
    }

    #[test]
    fn resolves_relative_links_inside_the_root() {
        let fs = tree();
        assert_eq!(
            fs.resolve("bus/pci/devices/0000:00:01.0/vendor").unwrap(),
            (
                "devices/pci0000:00/0000:00:01.0/vendor".to_string(),
                EntryKind::File
            )
        );
        assert_eq!(
            fs.read("bus/pci/devices/0000:00:01.0/vendor").unwrap(),
            "0x1dd8\n"
        );
        assert_eq!(
            fs.link_name("bus/pci/devices/0000:00:01.0").unwrap(),
            "0000:00:01.0"
        );
    }

    #[test]
    fn refuses_dangling_escaping_and_looping_links() {
        let fs = tree();
        assert!(
            fs.resolve("bus/pci/devices/dangling")
                .unwrap_err()
                .is_not_found()
        );
        assert!(matches!(
            fs.resolve("bus/pci/devices/escape"),
            Err(FsError::Escapes { .. })
        ));
        assert!(matches!(
            fs.read("bus/pci/devices/absolute"),
            Err(FsError::Escapes { .. })
        ));
        assert!(matches!(
            fs.resolve("bus/pci/devices/loop-a"),
            Err(FsError::Loop { .. })
        ));
        assert!(matches!(
            fs.resolve("devices/pci0000:00/0000:00:01.0/self"),
            Err(FsError::Loop { .. })
        ));
        assert!(matches!(fs.resolve("../x"), Err(FsError::Escapes { .. })));
    }

    #[test]
    fn files_are_not_directories() {
        let fs = tree();
        assert!(matches!(
            fs.resolve("devices/pci0000:00/0000:00:01.0/vendor/x"),
            Err(FsError::WrongKind { .. })
        ));
        assert!(matches!(
            fs.read("devices/pci0000:00"),
            Err(FsError::WrongKind { .. })
        ));
        let names: Vec<String> = fs
            .list("bus/pci/devices")
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(
            names,
            [
                "0000:00:01.0",
                "absolute",
                "dangling",
                "escape",
                "loop-a",
                "loop-b"
            ]
        );
        assert!(fs.exists("bus/pci/devices/dangling"));
        assert!(!fs.exists("bus/pci/devices/nothing"));
    }
}
