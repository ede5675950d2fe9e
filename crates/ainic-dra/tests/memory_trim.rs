//! `ainic_dra_daemon::memory::trim` gives freed heap back to the kernel (glibc keeps
//! it otherwise). Its own test binary: RSS is per process.

/// Resident set size of this process, in kB.
fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_trim_returns_the_freed_heap_that_malloc_kept() {
    // 64 MiB in small blocks, then freed all but the last one, which pins
    // the top of the heap so that malloc cannot shrink it by itself.
    let mut blocks: Vec<Vec<u8>> = (0..256 * 1024).map(|i| vec![i as u8; 256]).collect();
    let pin = blocks.pop();
    drop(blocks);
    let kept = rss_kb();
    ainic_dra_daemon::memory::trim();
    let trimmed = rss_kb();
    drop(pin);
    assert!(
        trimmed + 32 * 1024 < kept,
        "RSS {kept} kB after the free, {trimmed} kB after the trim"
    );
}
