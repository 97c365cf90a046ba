//! `FastDropout` draws its masks from the backend's seeded generator: a run seeded the same way
//! draws the same masks, and successive calls (layers, steps) draw different ones. One test in
//! its own binary, so no other test draws from the shared generator in between.

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use megagraph_models::FastDropoutConfig;
use megagraph_models::dropout::draw_seed;

type Train = Autodiff<Flex>;

fn two_calls(seed: u64) -> (u64, TensorData, TensorData) {
    let device = Default::default();
    Train::seed(&device, seed);
    let first_seed = draw_seed::<Train>(&device);
    let dropout = FastDropoutConfig::new(0.4).init();
    let x = Tensor::<Train, 3>::ones([2, 16, 32], &device);
    (
        first_seed,
        dropout.forward(x.clone()).into_data(),
        dropout.forward(x).into_data(),
    )
}

#[test]
fn masks_follow_the_backend_seed_and_differ_per_call() {
    let _turn = crate::turn();
    let (seed_a, first_a, second_a) = two_calls(42);
    let (seed_b, first_b, second_b) = two_calls(42);
    let (seed_c, first_c, _) = two_calls(43);
    assert_eq!(seed_a, seed_b);
    assert_eq!(first_a, first_b);
    assert_eq!(second_a, second_b);
    assert_ne!(first_a, second_a, "two calls drew the same mask");
    assert_ne!(seed_a, seed_c);
    assert_ne!(first_a, first_c, "two seeds drew the same mask");
}
