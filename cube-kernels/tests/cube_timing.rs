//! Rough timing of the CubeCL kernels on wgpu (llvmpipe without a GPU): forward + backward of
//! one `[1, 4, N, head_dim]` problem with a distance bias, median of 3 after a warm-up. Ignored
//! by default:
//!
//! ```text
//! CUBE_TIMING_N=1024 cargo test --release -p megagraph-kernels --features wgpu \
//!     --test cube_timing -- --ignored --nocapture
//! ```

#![cfg(feature = "wgpu")]

use std::sync::OnceLock;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, WgpuRuntime, graphics::OpenGl, init_setup};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use megagraph_kernels::{AttentionBias, AttentionOptions, DistanceBias, graph_attention};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Wgpu = burn::backend::wgpu::CubeBackend<WgpuRuntime, f32, i32, u32>;
type A = Autodiff<Wgpu>;

const HEADS: usize = 4;
const BUCKETS: usize = 32;

fn device() -> WgpuDevice {
    static SETUP: OnceLock<()> = OnceLock::new();
    SETUP.get_or_init(|| {
        init_setup::<OpenGl>(&WgpuDevice::Cpu, RuntimeOptions::default());
    });
    WgpuDevice::Cpu
}

fn step(n: usize, head_dim: usize, rng: &mut ChaCha8Rng, device: &WgpuDevice) -> f64 {
    let shape = [1, HEADS, n, head_dim];
    let mut floats = |count: usize| -> Vec<f32> {
        (0..count).map(|_| rng.random_range(-1.0..1.0)).collect()
    };
    let len = HEADS * n * head_dim;
    let (q, k, v, r, table) = (
        floats(len),
        floats(len),
        floats(len),
        floats(len),
        floats(BUCKETS * HEADS),
    );
    let index: Vec<u8> = (0..n * n).map(|x| (x % BUCKETS) as u8).collect();
    let leaf = |values: Vec<f32>| {
        Tensor::<A, 4>::from_data(TensorData::new(values, shape), device).require_grad()
    };
    let (q, k, v) = (leaf(q), leaf(k), leaf(v));
    let r = Tensor::<A, 4>::from_data(TensorData::new(r, shape), device);
    let table =
        Tensor::<A, 2>::from_data(TensorData::new(table, [BUCKETS, HEADS]), device).require_grad();
    let index = DistanceBias::<A>::index_from_u8(index, [1, n, n], device)
        .unwrap_or_else(|e| panic!("{e}"));
    <A as Backend>::sync(device).unwrap_or_else(|e| panic!("{e:?}"));
    let started = Instant::now();
    let bias = AttentionBias {
        distance: Some(DistanceBias {
            index: index.into(),
            table,
            column_offset: 0,
        }),
        dense: None,
        key_padding_mask: None,
    };
    let result = graph_attention(q, k, v, bias, &AttentionOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let loss = (result.output * r).sum() + result.lse.sum();
    drop(loss.backward());
    <A as Backend>::sync(device).unwrap_or_else(|e| panic!("{e:?}"));
    started.elapsed().as_secs_f64()
}

#[test]
#[ignore = "timing; run with --ignored --nocapture"]
fn time_forward_backward() {
    let device = device();
    let n: usize = std::env::var("CUBE_TIMING_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for head_dim in [8, 64] {
        step(n, head_dim, &mut rng, &device);
        let mut times: Vec<f64> = (0..3).map(|_| step(n, head_dim, &mut rng, &device)).collect();
        times.sort_by(f64::total_cmp);
        println!(
            "cube_timing: N={n} heads={HEADS} head_dim={head_dim}: forward+backward median {:.3} s \
             (of {times:.3?})",
            times[1]
        );
    }
}
