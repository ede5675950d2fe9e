//! Issue 29 item 4: a flood on the agent's HTTP port must not starve the
//! node agent. The real `ainic-dra node` runs under a low open-file limit
//! (soft 64, hard 160, as `prlimit` sets them) while thousands of idle
//! connections and slow (slowloris) clients, which reconnect whenever
//! they are dropped, hit its `--http-addr`; meanwhile the kubelet
//! simulator registers the plugin again over fresh sockets and prepares
//! and unprepares claims, and a probe asks `/healthz`. Every call must
//! succeed. Before the fix the flood took every descriptor: accept
//! failed with EMFILE in a loop that spun a core, and the kubelet's
//! sockets could accept nothing.
//!
//! The agent's CPU time, RSS and open descriptors during the flood are
//! printed (`-- --nocapture`) for docs/benchmarks.md; they are figures,
//! not assertions.

mod node_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use node_support::{DRIVER, NODE, World, http_get, within};

const PF0: &str = "pf-0000-04-00-0";
const PF1: &str = "pf-0000-24-00-0";
const SOFT: u64 = 64;
const HARD: u64 = 160;
const IDLE: usize = 2000;
const SLOW: usize = 1000;

/// What /proc says about the agent.
#[derive(Debug)]
struct Sample {
    /// User + system CPU time, in clock ticks (USER_HZ, 100 a second).
    ticks: u64,
    rss_kib: u64,
    fds: usize,
}

fn sample(pid: u32) -> Sample {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib = (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    Sample {
        ticks,
        rss_kib,
        fds,
    }
}

/// The soft and hard "Max open files" of `pid`.
fn nofile_of(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = (limits.lines())
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let mut words = line["Max open files".len()..].split_whitespace();
    (
        words.next().unwrap().to_string(),
        words.next().unwrap().to_string(),
    )
}

/// `/healthz` as the kubelet probes it: up to 3 tries (its
/// `failureThreshold`), each dropped when the agent closes the
/// connection or answers nothing within a second; the statuses seen.
async fn probe(addr: SocketAddr) -> Vec<String> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let Some(mut s) = connect(addr).await else {
            seen.push("no connection".to_string());
            continue;
        };
        let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let mut out = Vec::new();
        let answered = async {
            s.write_all(request).await?;
            s.read_to_end(&mut out).await
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), answered).await;
        let out = String::from_utf8_lossy(&out);
        let status = out.get(9..12).unwrap_or("closed").to_string();
        let ok = status == "200";
        seen.push(status);
        if ok {
            break;
        }
    }
    seen
}

async fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let dialled = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr));
    dialled.await.ok()?.ok()
}

/// The attack: `IDLE` connections opened and held, and `SLOW` clients
/// that send a request's first line and then a header byte every 200 ms,
/// reconnecting whenever the agent drops them; until `stop`.
struct Flood {
    stop: Arc<AtomicBool>,
    idle: Vec<TcpStream>,
    slow: Vec<tokio::task::JoinHandle<()>>,
    reconnects: Arc<AtomicUsize>,
}

async fn flood(addr: SocketAddr) -> Flood {
    let stop = Arc::new(AtomicBool::new(false));
    let reconnects = Arc::new(AtomicUsize::new(0));
    let mut idle = Vec::with_capacity(IDLE);
    let mut refused = 0;
    // An agent that accepts nothing fills its listen backlog: then stop.
    while idle.len() < IDLE && refused < 20 {
        match connect(addr).await {
            Some(s) => idle.push(s),
            None => refused += 1,
        }
    }
    let slow = (0..SLOW)
        .map(|_| {
            let (stop, reconnects) = (stop.clone(), reconnects.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut s) = connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    reconnects.fetch_add(1, Ordering::Relaxed);
                    let mut sent = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
                    while sent.is_ok() && !stop.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        sent = s.write_all(b"X").await;
                    }
                }
            })
        })
        .collect();
    Flood {
        stop,
        idle,
        slow,
        reconnects,
    }
}

impl Flood {
    async fn end(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.slow {
            let _ = task.await;
        }
        (self.idle.len(), self.reconnects.load(Ordering::Relaxed))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_under_a_low_nofile_leaves_the_kubelet_sockets_working() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let agent = world.start_agent_limited(None, &[], Some((SOFT, HARD)));
    let pid = agent.child.id();
    let kubelet = world.register().await;
    assert_eq!(
        nofile_of(pid),
        (HARD.to_string(), HARD.to_string()),
        "the soft open-file limit is raised to the hard one at start"
    );
    let addr: SocketAddr = agent.http.parse().unwrap();
    assert_eq!(http_get(&agent.http, "/healthz").await.0, 200);
    let before = sample(pid);

    let started = Instant::now();
    let flood = flood(addr).await;
    let opened = Instant::now();
    let during = sample(pid);

    // Registration over fresh sockets, prepare and unprepare, a probe.
    let again = within("registration", world.register()).await;
    let a = world.claim("a", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let b = world.claim("b", &[("nic", DRIVER, NODE, PF1)], json!([]));
    let done = within("prepare", again.prepare_v1(&[a.clone(), b.clone()]))
        .await
        .unwrap();
    for claim in [&a, &b] {
        assert_eq!(
            done.claims[&claim.uid].error, "",
            "prepare during the flood"
        );
    }
    let probed = probe(addr).await;
    assert!(probed.contains(&"200".to_string()), "probe: {probed:?}");
    let undone = within("unprepare", kubelet.unprepare_v1(&[a.clone(), b.clone()]))
        .await
        .unwrap();
    for claim in [&a, &b] {
        assert_eq!(
            undone.claims[&claim.uid].error, "",
            "unprepare during the flood"
        );
    }
    assert!(world.checkpoint_claims().is_empty());

    // The flood goes on a while with nothing else to do: CPU is the
    // agent's cost of fending it off.
    let quiet = sample(pid);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = sample(pid);
    let window_ms = window.elapsed().as_millis() as f64;
    let flooded = started.elapsed();
    let (idle, slow_connections) = flood.end().await;
    let opening_ms = (opened - started).as_millis() as f64;
    let percent = |ticks: u64, ms: f64| ticks as f64 * 10.0 * 100.0 / ms;
    println!(
        "http flood: {idle} idle + {slow_connections} slowloris connections over {:.1} s; agent CPU \
         {:.1}% of a core while the {IDLE} idle ones opened ({:.0} ms), {:.1}% over {:.0} ms of \
         slowloris alone; RSS {} KiB before, {} KiB in the flood, {} KiB at its end; open fds {} \
         before, {} in the flood, {} at its end; nofile {SOFT}:{HARD} raised to {HARD}; \
         probe answers {probed:?}",
        flooded.as_secs_f64(),
        percent(during.ticks - before.ticks, opening_ms),
        opening_ms,
        percent(after.ticks - quiet.ticks, window_ms),
        window_ms,
        before.rss_kib,
        during.rss_kib,
        after.rss_kib,
        before.fds,
        during.fds,
        after.fds,
    );
}
