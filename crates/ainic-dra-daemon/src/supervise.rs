//! One supervisor for the long-lived tasks of a process.
//!
//! The node agent and the controller each run about a dozen tasks for
//! their whole life (watches, the refresh loop, the publisher, servers).
//! A bare `tokio::spawn` loses a task that returns early or panics
//! without a word: the process keeps running, healthy to its probes,
//! with part of it gone (an inventory nobody refreshes, a watch nobody
//! reads). Here every such task has a name and a policy:
//! - [`Tasks::spawn_critical`]: the process cannot do its job without it.
//!   Its end before shutdown, by return or panic, is logged with its name
//!   and reported to [`Supervisor::watch`], which hands it to the caller
//!   to stop the process on purpose (exit non-zero; the kubelet or the
//!   Deployment restarts it, and start-up converges from the checkpoint
//!   and the API).
//! - [`Tasks::spawn_restarting`]: cheap to start again and holding no
//!   state worth keeping: restarted after a capped backoff, each restart
//!   logged with the task's name and its count.
//! - [`Tasks::spawn_once`]: work that ends by itself (a one-off sweep);
//!   only a panic is a failure.
//!
//! Shutdown has two steps. [`Supervisor::shutting_down`] makes every end
//! expected from then on: the owners of work that must finish rather than
//! be cancelled (prepares under way, the checkpoint's last commit, a
//! final publish) stop it their own way and wait for it ([`Done`]). Then
//! [`Supervisor::stop`] cancels every task left at its next await point
//! and waits for them within a deadline.
//!
//! Each task runs as a tokio task of its own, watched by a second one
//! that awaits its handle: a panic is caught by tokio, not by unwinding
//! through our code, and its message reaches the log.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Backoff;

/// A task that ended while the process still needed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {task} {how}")]
pub struct TaskFailed {
    /// The task's name, as given at spawn.
    pub task: &'static str,
    /// How it ended: "returned", "panicked: MESSAGE".
    pub how: String,
}

/// Spawns supervised tasks; cheap to clone and hand to whoever starts one.
#[derive(Clone, Debug)]
pub struct Tasks {
    tracker: TaskTracker,
    stop: CancellationToken,
    quiet: CancellationToken,
    failed: mpsc::UnboundedSender<TaskFailed>,
    restart: Backoff,
}

/// Receives the failures of critical tasks and stops them all at the end.
#[derive(Debug)]
pub struct Supervisor {
    tasks: Tasks,
    failed: mpsc::UnboundedReceiver<TaskFailed>,
}

/// Resolves once a spawned task has ended (or was cancelled).
#[derive(Clone, Debug)]
pub struct Done(CancellationToken);

impl Done {
    /// Waits for the task's end.
    pub async fn wait(&self) {
        self.0.cancelled().await;
    }

    /// Whether the task has ended.
    pub fn is_done(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// Why [`Supervisor::watch`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The shutdown future resolved (SIGTERM, SIGINT).
    Asked,
    /// A critical task ended first.
    Failed(TaskFailed),
}

impl Stopped {
    /// The task that failed, if that is why it stopped.
    pub fn failure(self) -> Option<TaskFailed> {
        match self {
            Stopped::Asked => None,
            Stopped::Failed(failed) => Some(failed),
        }
    }
}

impl Supervisor {
    /// A supervisor and the handle that spawns under it.
    pub fn new() -> (Supervisor, Tasks) {
        let (failed_tx, failed) = mpsc::unbounded_channel();
        let tasks = Tasks {
            tracker: TaskTracker::new(),
            stop: CancellationToken::new(),
            quiet: CancellationToken::new(),
            failed: failed_tx,
            restart: Backoff {
                initial: Duration::from_millis(500),
                max: Duration::from_secs(30),
                attempts: u32::MAX,
                ..Backoff::default()
            },
        };
        let supervisor = Supervisor {
            tasks: tasks.clone(),
            failed,
        };
        (supervisor, tasks)
    }

    /// Waits for `shutdown` or for the first critical task to fail,
    /// whichever comes first.
    pub async fn watch(&mut self, shutdown: impl Future<Output = ()>) -> Stopped {
        tokio::select! {
            () = shutdown => Stopped::Asked,
            Some(failed) = self.failed.recv() => Stopped::Failed(failed),
        }
    }

    /// From now on a task's end is expected (the process is stopping):
    /// logged, never a failure, and no task is restarted.
    pub fn shutting_down(&self) {
        self.tasks.quiet.cancel();
    }

    /// Cancels every task and waits up to `deadline` for all to end;
    /// false when some did not (they are left to the runtime's shutdown).
    pub async fn stop(self, deadline: Duration) -> bool {
        self.tasks.quiet.cancel();
        self.tasks.stop.cancel();
        self.tasks.tracker.close();
        let ended = tokio::time::timeout(deadline, self.tasks.tracker.wait())
            .await
            .is_ok();
        if !ended {
            let left = self.tasks.tracker.len();
            tracing::warn!(left, "tasks still running after the stop deadline");
        }
        ended
    }
}

impl Tasks {
    /// Cancelled when the supervisor stops: for tasks that want to finish
    /// their own way instead of being dropped at an await point.
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Runs `task` for the life of the process; its end before shutdown
    /// is a failure reported to [`Supervisor::watch`].
    pub fn spawn_critical<F>(&self, name: &'static str, task: F) -> Done
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.watched(async move |this: Tasks| {
            let Some(ended) = this.run(tokio::spawn(task)).await else {
                return;
            };
            let how = how(ended);
            if this.quiet.is_cancelled() {
                return tracing::debug!(task = name, %how, "task ended at shutdown");
            }
            tracing::error!(task = name, %how, "critical task ended; stopping");
            let _ = this.failed.send(TaskFailed { task: name, how });
        })
    }

    /// Runs the task `start` makes, and a new one after a capped backoff
    /// each time it ends or panics, until shutdown.
    pub fn spawn_restarting<S, F>(&self, name: &'static str, mut start: S) -> Done
    where
        S: FnMut() -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        self.watched(async move |this: Tasks| {
            let mut restarts = 0u32;
            while let Some(ended) = this.run(tokio::spawn(start())).await {
                if this.quiet.is_cancelled() {
                    return;
                }
                restarts = restarts.saturating_add(1);
                let delay = this.restart.delay(restarts);
                let delay_ms = delay.as_millis() as u64;
                let how = how(ended);
                tracing::warn!(task = name, %how, restarts, delay_ms, "task ended; restarting");
                tokio::select! {
                    () = this.quiet.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        })
    }

    /// Runs `task` to its end; a panic is a failure reported to
    /// [`Supervisor::watch`], a return is not.
    pub fn spawn_once<F>(&self, name: &'static str, task: F) -> Done
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.watched(async move |this: Tasks| {
            if let Some(Err(error)) = this.run(tokio::spawn(task)).await {
                let how = how(Err(error));
                tracing::error!(task = name, %how, "task panicked; stopping");
                let _ = this.failed.send(TaskFailed { task: name, how });
            }
        })
    }

    /// Runs `watch` (which runs and watches one task) on the tracker; the
    /// [`Done`] resolves when it ends.
    fn watched<W>(&self, watch: impl FnOnce(Tasks) -> W) -> Done
    where
        W: Future<Output = ()> + Send + 'static,
    {
        let done = CancellationToken::new();
        let guard = done.clone().drop_guard();
        let watching = watch(self.clone());
        self.tracker.spawn(async move {
            let _guard = guard;
            watching.await;
        });
        Done(done)
    }

    /// Awaits `handle` until it ends (`Some`) or the supervisor stops
    /// (`None`: the task is aborted and awaited).
    async fn run(&self, mut handle: tokio::task::JoinHandle<()>) -> Option<Result<(), JoinError>> {
        // The stop first: a task that ends because of it is no failure.
        tokio::select! {
            biased;
            () = self.stop.cancelled() => {
                handle.abort();
                let _ = handle.await;
                None
            }
            ended = &mut handle => Some(ended),
        }
    }
}

/// "returned" or "panicked: MESSAGE".
fn how(ended: Result<(), JoinError>) -> String {
    match ended {
        Ok(()) => "returned".to_string(),
        Err(error) if error.is_panic() => {
            let payload = error.into_panic();
            let message = (payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            format!("panicked: {message}")
        }
        Err(_) => "was cancelled".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_critical_task_that_panics_is_reported_by_name() {
        let (mut supervisor, tasks) = Supervisor::new();
        tasks.spawn_critical("forever", std::future::pending());
        tasks.spawn_critical("refresher", async { panic!("sysfs vanished") });
        let stopped = supervisor.watch(std::future::pending()).await;
        let Stopped::Failed(failed) = stopped else {
            panic!("{stopped:?}")
        };
        assert_eq!(failed.task, "refresher");
        assert_eq!(failed.how, "panicked: sysfs vanished");
        assert_eq!(
            failed.to_string(),
            "task refresher panicked: sysfs vanished"
        );
        assert!(
            supervisor.stop(Duration::from_secs(5)).await,
            "the pending one is cancelled"
        );
    }

    #[tokio::test]
    async fn a_critical_task_that_returns_is_a_failure_too() {
        let (mut supervisor, tasks) = Supervisor::new();
        tasks.spawn_critical("slice watch", async {});
        let stopped = supervisor.watch(std::future::pending()).await;
        let failed = TaskFailed {
            task: "slice watch",
            how: "returned".into(),
        };
        assert_eq!(stopped, Stopped::Failed(failed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_restarting_task_is_started_again_until_the_stop() {
        let (mut supervisor, tasks) = Supervisor::new();
        let starts = Arc::new(AtomicU32::new(0));
        let counted = starts.clone();
        tasks.spawn_restarting("trimmer", move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n.is_multiple_of(2) {
                    panic!("start {n}");
                }
            }
        });
        let shutdown = tokio::time::sleep(Duration::from_secs(60));
        assert_eq!(supervisor.watch(shutdown).await, Stopped::Asked);
        let before = starts.load(Ordering::SeqCst);
        // 500 ms doubling to 30 s: 0.5+1+2+4+8+16+30 s < 60 s.
        assert!(before >= 7, "restarted {before} times");
        assert!(supervisor.stop(Duration::from_secs(5)).await);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(starts.load(Ordering::SeqCst), before, "none after the stop");
    }

    #[tokio::test]
    async fn a_one_off_task_may_return_but_not_panic() {
        let (mut supervisor, tasks) = Supervisor::new();
        tasks.spawn_once("sweep", async {});
        tasks.spawn_once("bad sweep", async { panic!("boom") });
        let Stopped::Failed(failed) = supervisor.watch(std::future::pending()).await else {
            panic!("no failure")
        };
        assert_eq!(failed.task, "bad sweep");
    }

    #[tokio::test]
    async fn an_end_after_shutting_down_is_no_failure_and_done_says_so() {
        let (mut supervisor, tasks) = Supervisor::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let publisher = tasks.spawn_critical("publisher", async move {
            let _ = rx.await;
        });
        supervisor.shutting_down();
        assert!(!publisher.is_done());
        drop(tx);
        publisher.wait().await;
        let watched = supervisor.watch(tokio::time::sleep(Duration::from_millis(50)));
        assert_eq!(watched.await, Stopped::Asked, "no failure reported");
    }

    #[tokio::test]
    async fn the_stop_cancels_tasks_and_says_whether_all_ended() {
        let (mut supervisor, tasks) = Supervisor::new();
        let stopping = tasks.stopping();
        tasks.spawn_critical("server", std::future::pending());
        tasks.spawn_critical("publisher", async move { stopping.cancelled().await });
        assert_eq!(supervisor.watch(async {}).await, Stopped::Asked);
        assert!(supervisor.stop(Duration::from_secs(5)).await);
    }
}
