//! Splitting a run of items over threads, each with its own view of the
//! tree (a [`Sysfs`] caches what it learns and is not shared).

use std::path::Path;

use crate::sysfs::{DirBackend, Sysfs};

/// `job` over `items` cut into `workers` runs of about the same length,
/// one thread each, the results in run order. A run no thread could be
/// started for is done here, with `here`; so is everything when `workers`
/// is 1.
pub(crate) fn map_runs<T, R>(
    root: &Path,
    here: &Sysfs<DirBackend>,
    workers: usize,
    items: &[T],
    job: impl Fn(&Sysfs<DirBackend>, &[T]) -> R + Sync,
) -> Vec<R>
where
    T: Sync,
    R: Send,
{
    if workers <= 1 || items.len() <= 1 {
        return vec![job(here, items)];
    }
    let run_len = items.len().div_ceil(workers);
    let job = &job;
    std::thread::scope(|s| {
        let started: Vec<_> = items
            .chunks(run_len)
            .map(|run| {
                let work = move || job(&Sysfs::open(root), run);
                (run, std::thread::Builder::new().spawn_scoped(s, work))
            })
            .collect();
        started
            .into_iter()
            .map(|(run, thread)| match thread {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: read this run here.
                Err(_) => job(here, run),
            })
            .collect()
    })
}
