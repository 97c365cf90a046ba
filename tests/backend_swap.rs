//! Backend swap: the whole Graph Transformer (input encoder, centrality embeddings, layers with
//! the spatial bias, head) runs one forward and backward on `Flex` and on another backend from
//! the same parameters and the same batch; the loss and every parameter's gradient agree to
//! 1e-4 (norm-wise relative error per tensor).
//!
//! - `--features wgpu`: Burn's public `Wgpu` backend (fused; the attention op runs the CubeCL
//!   kernels as custom fusion operations) and the plain `CubeBackend` over wgpu (the same
//!   kernels, launched directly), both on Mesa's software OpenGL (llvmpipe), no GPU needed (`apt-get install -y libegl1
//!   libgl1-mesa-dri`).
//! - `--features cuda` on a machine with an NVIDIA GPU: the same against Burn's `Cuda` backend.

#![cfg(any(feature = "wgpu", feature = "cuda-untuned"))]


use burn::backend::{Autodiff, Flex};
use burn::module::{Module, ModuleVisitor, Param};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor};
use megagraph::models::{GraphAttentionBackend, GraphTransformer, GraphTransformerConfig, masked_cross_entropy};
use megagraph::train::{SequenceDataset, TrainConfig, prepare};

/// Loss tolerance (relative).
const TOL: f64 = 1e-4;
/// Gradient tolerance (norm-wise relative per tensor). Measured on wgpu/llvmpipe: at most
/// 6e-6. (With Burn's `Gelu` the FFN input's gradients were 3e-4 off: CubeCL backends
/// differentiate GELU's tanh approximation; the model's `ExactGelu` fixed that.)
const GRAD_TOL: f64 = 1e-4;
/// Gradients that are zero in exact arithmetic (the key projection's bias: softmax ignores a
/// shift shared by all keys) are float noise on both backends; their error is measured against
/// this fraction of the largest gradient norm instead of their own norm.
const NOISE_FLOOR: f64 = 1e-3;

/// A small synthetic graph as sequences: with node features, or without (learned node
/// embeddings).
fn data(features: bool) -> SequenceDataset {
    let mut config = TrainConfig::default();
    config.synthetic.nodes = 120;
    config.synthetic.classes = 4;
    config.synthetic.feature_dim = 12;
    config.synthetic.seed = 5;
    config.data.seq_len = 40;
    config.data.feature_hops = Some(1);
    let mut data = prepare(&config).expect("prepare");
    if !features {
        data.dataset.features = None;
    }
    data
}

fn model_config(data: &SequenceDataset) -> GraphTransformerConfig {
    let d = &data.dataset;
    GraphTransformerConfig::new(d.graph.num_nodes(), d.num_classes)
        .with_feature_dim(d.features.as_ref().map(|f| f.dim))
        .with_num_layers(2)
        .with_num_heads(2)
        .with_hidden(16)
        .with_ffn_hidden(24)
        .with_dropout(0.0)
        .with_input_dropout(0.0)
        .with_key_dropout(0.0)
        .with_block_size(16)
}

/// The loss and the gradient of every parameter (in module order), as f64.
fn loss_and_gradients<A>(model: GraphTransformer<A>, data: &SequenceDataset, device: &A::Device) -> (f64, Vec<(String, Vec<f64>)>)
where
    A: AutodiffBackend + GraphAttentionBackend,
{
    // Two sequences, the last one shorter than seq_len (padding exercised).
    let last = data.num_sequences() - 1;
    let batch = data.batch::<A>(&[0, last], device);
    let count = data.train_nodes(&batch.nodes);
    assert!(count > 0, "the batch has training nodes");
    let logits = model.forward(batch.graph);
    let loss = masked_cross_entropy(logits, batch.labels, batch.train_weight, count);
    let value = loss.clone().into_scalar().elem::<f64>();
    let grads = loss.backward();

    struct Collect<'a, A: AutodiffBackend> {
        grads: &'a A::Gradients,
        out: Vec<(String, Vec<f64>)>,
    }
    impl<A: AutodiffBackend> ModuleVisitor<A> for Collect<'_, A> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<A, D>>) {
            let name = format!("{:?} {:?}", param.id, param.val().dims());
            let grad = param
                .val()
                .grad(self.grads)
                .map(|g| g.into_data().iter::<f64>().collect())
                .unwrap_or_else(|| panic!("parameter {name} has no gradient"));
            self.out.push((name, grad));
        }
    }
    let mut collect = Collect::<A> { grads: &grads, out: Vec::new() };
    model.visit(&mut collect);
    (value, collect.out)
}

/// `|found - expected| / max(|expected|, floor)`.
fn relative_error(found: &[f64], expected: &[f64], floor: f64) -> f64 {
    let diff: f64 = found.iter().zip(expected).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = expected.iter().map(|b| b * b).sum::<f64>().sqrt();
    diff / norm.max(floor).max(f64::MIN_POSITIVE)
}

/// The tests take turns: CubeCL's autotuners of two tests on the same device (the fused and the
/// plain backend share wgpu's device) can wait on each other forever when they tune at the same
/// time, which a fresh checkout (no autotune cache) does.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs the model on Flex and on `A` from the same parameters and compares.
fn compare<A>(device: &A::Device, features: bool)
where
    A: AutodiffBackend + GraphAttentionBackend,
{
    let _turn = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let data = data(features);
    let config = model_config(&data);
    let flex_device = Default::default();
    Autodiff::<Flex>::seed(&flex_device, 11);
    // Parameters are initialized lazily (at first use, and again in each clone): serialize them
    // once and load the same bytes on both backends.
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let initial: GraphTransformer<Autodiff<Flex>> = config.init(&flex_device);
    let bytes = Recorder::<Autodiff<Flex>>::record(&recorder, initial.into_record(), ()).expect("record");
    let reference: GraphTransformer<Autodiff<Flex>> = config
        .init(&flex_device)
        .load_record(Recorder::<Autodiff<Flex>>::load(&recorder, bytes.clone(), &flex_device).expect("load"));
    let other: GraphTransformer<A> = config
        .init(device)
        .load_record(Recorder::<A>::load(&recorder, bytes, device).expect("load the record"));

    let (expected_loss, expected) = loss_and_gradients(reference, &data, &flex_device);
    let (loss, found) = loss_and_gradients(other, &data, device);
    let loss_error = (loss - expected_loss).abs() / expected_loss.abs();
    assert!(loss_error <= TOL, "loss {loss} vs {expected_loss} on Flex (relative error {loss_error:.2e})");
    assert_eq!(found.len(), expected.len());
    assert!(expected.len() > 10, "every parameter is compared ({} tensors)", expected.len());
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let largest = expected.iter().map(|(_, e)| norm(e)).fold(0.0, f64::max);
    assert!(largest > 0.0, "every gradient is zero on Flex: the test would be vacuous");
    let errors: Vec<(String, f64)> = found
        .iter()
        .zip(&expected)
        .map(|((name, g), (_, e))| (name.clone(), relative_error(g, e, NOISE_FLOOR * largest)))
        .collect();
    let worst = errors.iter().map(|(_, e)| *e).fold(0.0, f64::max);
    println!("loss relative error {loss_error:.2e}; worst gradient relative error {worst:.2e} over {} tensors", errors.len());
    for (name, error) in &errors {
        println!("  {name}: {error:.2e}");
    }
    for (name, error) in errors {
        assert!(error <= GRAD_TOL, "gradient of {name}: relative error {error:.2e}");
    }
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use std::sync::OnceLock;

    use burn::backend::Autodiff;
    use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, WgpuRuntime, graphics::OpenGl, init_setup};

    fn device() -> WgpuDevice {
        static SETUP: OnceLock<()> = OnceLock::new();
        SETUP.get_or_init(|| {
            init_setup::<OpenGl>(&WgpuDevice::Cpu, RuntimeOptions::default());
        });
        WgpuDevice::Cpu
    }

    /// Burn's public `Wgpu` type (fusion on; the attention kernels as custom fusion operations).
    type Fused = burn::backend::Wgpu;
    /// The plain CubeCL backend (the attention kernels).
    type Cube = burn::backend::wgpu::CubeBackend<WgpuRuntime, f32, i32, u32>;

    #[test]
    fn fused_wgpu_matches_flex_with_features() {
        super::compare::<Autodiff<Fused>>(&device(), true);
    }

    #[test]
    fn fused_wgpu_matches_flex_with_node_embeddings() {
        super::compare::<Autodiff<Fused>>(&device(), false);
    }

    #[test]
    fn cube_kernels_on_wgpu_match_flex() {
        super::compare::<Autodiff<Cube>>(&device(), true);
    }
}

#[cfg(feature = "cuda-untuned")]
mod cuda {
    use burn::backend::Autodiff;
    use burn::backend::cuda::CudaDevice;

    #[test]
    fn cuda_matches_flex_with_features() {
        super::compare::<Autodiff<burn::backend::Cuda>>(&CudaDevice::default(), true);
    }

    #[test]
    fn cuda_matches_flex_with_node_embeddings() {
        super::compare::<Autodiff<burn::backend::Cuda>>(&CudaDevice::default(), false);
    }
}
