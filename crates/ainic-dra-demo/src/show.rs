//! How the demo talks: numbered chapters, progress lines, short aligned
//! tables. Colour only when stdout is a terminal (and `NO_COLOR` is unset).

use std::io::IsTerminal;
use std::time::Instant;

/// The demo's narrator.
pub(crate) struct Story {
    color: bool,
    started: Instant,
    chapter: usize,
}

const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";
const RESET: &str = "\x1b[0m";

impl Story {
    /// A narrator for stdout.
    pub(crate) fn new() -> Story {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Story {
            color,
            started: Instant::now(),
            chapter: 0,
        }
    }

    fn paint(&self, style: &str, text: &str) -> String {
        if self.color {
            format!("{style}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    /// Starts the next numbered chapter.
    pub(crate) fn chapter(&mut self, title: &str) {
        self.chapter += 1;
        println!();
        println!(
            "{}",
            self.paint(BOLD, &format!("{}. {title}", self.chapter))
        );
    }

    /// A progress line.
    pub(crate) fn step(&self, text: &str) {
        println!("   {} {text}", self.paint(CYAN, "-"));
    }

    /// Something that worked as it should.
    pub(crate) fn ok(&self, text: &str) {
        println!("   {} {text}", self.paint(GREEN, "ok"));
    }

    /// Something refused, as it should be.
    pub(crate) fn refused(&self, text: &str) {
        println!("   {} {text}", self.paint(YELLOW, "no"));
    }

    /// A quieter remark.
    pub(crate) fn note(&self, text: &str) {
        for line in text.lines() {
            println!("     {}", self.paint(DIM, line));
        }
    }

    /// A table with a header row, columns left-aligned.
    pub(crate) fn table(&self, header: &[&str], rows: &[Vec<String>]) {
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(cell.chars().count());
                }
            }
        }
        let line = |cells: Vec<&str>| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            padded.join("  ").trim_end().to_string()
        };
        println!("     {}", self.paint(BOLD, &line(header.to_vec())));
        for row in rows {
            println!("     {}", line(row.iter().map(String::as_str).collect()));
        }
    }

    /// Seconds since the story began.
    pub(crate) fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}
