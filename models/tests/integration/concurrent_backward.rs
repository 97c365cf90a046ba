//! Several threads training at once in one process: every leaf gets its gradient
//! (tracel-ai/burn#5573, fixed in the vendored burn-autodiff, `vendor/burn-autodiff/PATCHES.md`
//! item 2).
//!
//! The end of every `backward()` sweeps all the process's autodiff graphs and frees the steps of
//! those no tensor references. Burn 0.21's `float_cat` drops its inputs' references before it
//! registers its own step, so a sweep by another thread in between freed the step of an input
//! that was the only node of its graph (an op on a leaf whose graph an earlier `backward()` had
//! consumed): the leaf then came back without a gradient, with no error. Each thread here owns
//! its leaves, reuses them across iterations, concatenates a few results of ops on them (and the
//! leaves themselves) and checks every gradient against its known value.

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Tensor, TensorData};

type Train = Autodiff<Flex>;

const THREADS: usize = 4;
const ITERATIONS: usize = 200;
/// Rows and columns of each leaf: big enough for the concatenation to take a while.
const ROWS: usize = 64;
const COLS: usize = 64;

/// A gradient that came back wrong: thread, iteration, leaf and what came back.
type Failure = (usize, usize, &'static str, Option<f32>);

/// One thread's loop; the gradients that were missing or wrong.
fn train(thread: usize) -> Vec<Failure> {
    let device = Default::default();
    let leaf = |value: f32| {
        Tensor::<Train, 2>::from_data(
            TensorData::new(vec![value; ROWS * COLS], [ROWS, COLS]),
            &device,
        )
        .require_grad()
    };
    let (a, b) = (leaf(1.0 + thread as f32), leaf(-0.5));
    let mut failures = Vec::new();
    for iteration in 0..ITERATIONS {
        // loss = 3 · sum(cat[a, 2a, b, b + 1, exp(0 · b)]): d/da = 3 + 6, d/db = 3 + 3 + 0
        let parts = vec![
            a.clone(),
            a.clone() * 2.0,
            b.clone(),
            b.clone() + 1.0,
            (b.clone() * 0.0).exp(),
        ];
        let loss = (Tensor::cat(parts, 0) * 3.0).sum();
        let grads = loss.backward();
        for (name, tensor, want) in [("a", &a, 9.0), ("b", &b, 6.0)] {
            let grad = tensor
                .grad(&grads)
                .map(|g| g.into_data().iter::<f32>().collect::<Vec<_>>());
            match grad {
                Some(values) if values.iter().all(|&v| v == want) => {}
                Some(values) => failures.push((thread, iteration, name, values.first().copied())),
                None => failures.push((thread, iteration, name, None)),
            }
        }
    }
    failures
}

#[test]
fn every_leaf_gets_its_gradient_when_threads_run_backward_at_once() {
    let _turn = crate::turn();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| std::thread::spawn(move || train(t)))
        .collect();
    let failures: Vec<Failure> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("a training thread panicked"))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} gradients missing or wrong (thread, iteration, leaf, first value): {:?}",
        failures.len(),
        THREADS * ITERATIONS * 2,
        &failures[..failures.len().min(10)]
    );
}
