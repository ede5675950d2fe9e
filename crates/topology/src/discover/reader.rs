//! The read context of one discovery pass: the tree, and the warnings met.
//!
//! Every attribute read goes through [`Reader::field`], which turns a
//! missing or garbage file into `None` plus one warning naming the device
//! and the file, so a bad file never costs more than its own attribute.

use crate::sysfs::parse::Parsed;
use crate::sysfs::{Backend, FsError, Sysfs};

/// Whether a missing file is worth a warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IfMissing {
    /// The kernel always provides the file: its absence is a problem.
    Warn,
    /// Absence is normal (an optional feature, a down link): stay quiet.
    Quiet,
}

/// The tree being read and the warnings collected so far.
pub(crate) struct Reader<'a, B> {
    pub(crate) fs: &'a Sysfs<B>,
    warnings: Vec<String>,
}

/// At most this many characters of a garbage value are quoted in a warning.
const QUOTE_CHARS: usize = 40;

impl<'a, B: Backend> Reader<'a, B> {
    pub(crate) fn new(fs: &'a Sysfs<B>) -> Self {
        Reader {
            fs,
            warnings: Vec::new(),
        }
    }

    /// Records (and logs) one problem about `who`.
    pub(crate) fn warn(&mut self, who: &str, message: String) {
        tracing::warn!(device = who, "{message}");
        self.warnings.push(format!("{who}: {message}"));
    }

    /// Appends warnings recorded (and logged) by another reader.
    pub(crate) fn extend_warnings(&mut self, warnings: Vec<String>) {
        self.warnings.extend(warnings);
    }

    pub(crate) fn into_warnings(self) -> Vec<String> {
        self.warnings
    }

    /// Reads and parses `dir/file`; `Err` carries the reason, without `who`.
    pub(crate) fn try_field<T>(
        &self,
        dir: &str,
        file: &str,
        parse: fn(&str) -> Parsed<T>,
    ) -> Result<Option<T>, (String, bool)> {
        let raw = self
            .fs
            .read_in(dir, file)
            .map_err(|e| (describe(file, &e), e.is_not_found()))?;
        parse(&raw).map_err(|why| {
            let quoted: String = raw.trim().chars().take(QUOTE_CHARS).collect();
            (format!("invalid {file} {quoted:?}: {why}"), false)
        })
    }

    /// `dir/file` parsed, or `None` (with a warning unless it is missing
    /// and `if_missing` is [`IfMissing::Quiet`]).
    pub(crate) fn field<T>(
        &mut self,
        who: &str,
        dir: &str,
        file: &str,
        parse: fn(&str) -> Parsed<T>,
        if_missing: IfMissing,
    ) -> Option<T> {
        match self.try_field(dir, file, parse) {
            Ok(value) => value,
            Err((_, true)) if if_missing == IfMissing::Quiet => None,
            Err((why, _)) => {
                self.warn(who, why);
                None
            }
        }
    }

    /// `dir/file` parsed, or `None` with a warning that `who` is skipped.
    pub(crate) fn required<T>(
        &mut self,
        who: &str,
        dir: &str,
        file: &str,
        parse: fn(&str) -> Parsed<T>,
    ) -> Option<T> {
        match self.try_field(dir, file, parse) {
            Ok(Some(value)) => Some(value),
            Ok(None) => {
                self.warn(who, format!("empty {file}; device skipped"));
                None
            }
            Err((why, _)) => {
                self.warn(who, format!("{why}; device skipped"));
                None
            }
        }
    }
}

fn describe(file: &str, error: &FsError) -> String {
    match error {
        FsError::NotFound { .. } => format!("cannot read {file}: missing"),
        other => format!("cannot read {file}: {other}"),
    }
}
