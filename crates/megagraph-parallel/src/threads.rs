//! The CPU cores of a rank: every rank runs in its own rayon thread pool.
//!
//! CPU backends (Flex's matmul, reductions, ...) parallelize large ops with rayon. Without a
//! pool of its own, every rank would send those ops to the one global pool, so a rank's op
//! would wait for another rank's op, and a rank alone (a pipeline filling up, a ring peer
//! waiting) would borrow every core. A rank in its own pool of `cores / ranks` threads is a
//! fixed slice of the machine, which is what "a device" of a CPU cluster is, and what the
//! planner's profiler measures with the same split.

use rayon::{ThreadPool, ThreadPoolBuilder};

/// The message of a thread's panic payload (`panic!` with a literal or a formatted message),
/// or a placeholder for any other payload: for errors that report a panicked rank or worker.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// Cores of this machine divided among `ranks` ranks (at least 1 each): the default of
/// [`TrainerOptions::threads_per_rank`](crate::TrainerOptions).
pub fn default_threads_per_rank(ranks: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / ranks.max(1)).max(1)
}

/// Runs `work` on a new rayon pool of `threads` threads (named `name-0`, `name-1`, ...), so
/// the rayon parallelism inside it stays on those threads, and returns its result. `work` runs
/// on the pool's first thread; a panic in it is resumed in the caller.
///
/// # Errors
///
/// The pool's threads could not be started.
pub fn run_in_pool<T: Send>(
    threads: usize,
    name: &str,
    work: impl FnOnce() -> T + Send,
) -> Result<T, rayon::ThreadPoolBuildError> {
    let pool = build_pool(threads, name)?;
    Ok(pool.install(work))
}

fn build_pool(threads: usize, name: &str) -> Result<ThreadPool, rayon::ThreadPoolBuildError> {
    let name = name.to_string();
    ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(move |index| format!("{name}-{index}"))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_a_pool_of_the_asked_size() {
        for threads in [1, 3] {
            let (inside, name) = run_in_pool(threads, "test-pool", || {
                (
                    rayon::current_num_threads(),
                    std::thread::current().name().map(str::to_string),
                )
            })
            .unwrap();
            assert_eq!(inside, threads);
            assert!(name.unwrap().starts_with("test-pool-"));
        }
    }

    #[test]
    fn a_panic_reaches_the_caller() {
        let outcome = std::panic::catch_unwind(|| run_in_pool(1, "test-panic", || panic!("boom")));
        assert_eq!(outcome.map(|_| ()).map_err(|p| panic_message(p.as_ref())), Err("boom".to_string()));
    }

    #[test]
    fn panic_messages_are_read_from_literal_and_formatted_payloads() {
        let message = |payload: Box<dyn std::any::Any + Send>| panic_message(payload.as_ref());
        assert_eq!(message(Box::new("literal")), "literal");
        assert_eq!(message(Box::new(format!("rank {}", 3))), "rank 3");
        assert_eq!(message(Box::new(7_u32)), "non-string panic payload");
    }

    #[test]
    fn default_threads_divide_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(default_threads_per_rank(1), cores);
        assert_eq!(default_threads_per_rank(0), cores);
        assert_eq!(default_threads_per_rank(cores * 4), 1);
    }
}
