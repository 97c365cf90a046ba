//! One timed forward and backward pass of a profiled part on the real Burn modules.

use crate::edges::SequenceEdges;
use crate::realize::{init_model, random_buckets};
use crate::split_mix::SplitMix;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorData};
use megagraph_kernels::{
    AttentionBias, AttentionError, AttentionOptions, DistanceBias, graph_attention,
};
use megagraph_models::{GraphTransformer, NodeInput, masked_cross_entropy};
use megagraph_parallel::{ContextParallelBackend, MemoryMeter};
use megagraph_planner::ModelShape;
use megagraph_planner::ProfiledPart;
use std::time::Instant;

/// What one run of a part measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Run {
    pub forward_seconds: f64,
    pub backward_seconds: f64,
    /// Live bytes after the forward pass minus before it (what backward will read, and the
    /// output).
    pub saved_bytes: u64,
    /// Peak over forward and backward minus the live bytes before the forward pass.
    pub peak_bytes: u64,
}

/// The real modules of one layer of a model shape, with the inputs of each part, on `device`.
pub(crate) struct PartBench<B: AutodiffBackend> {
    /// Written between forward and backward to evict the caches (empty: no eviction).
    evict: Vec<u8>,
    model: GraphTransformer<B>,
    shape: ModelShape,
    device: B::Device,
    rng: SplitMix,
}

/// A part's forward result: the scalar whose backward is timed, and tensors that stay alive
/// until the backward pass ends (what the real op around the part would keep).
type Loss<B> = (Tensor<B, 1>, Vec<Tensor<B, 4>>);

/// A part's forward pass on the model's modules, inputs captured.
type Forward<B> = Box<dyn FnOnce(&GraphTransformer<B>) -> Result<Loss<B>, AttentionError>>;

impl<B: ContextParallelBackend> PartBench<B> {
    /// Modules of `shape` (one layer) on `device`, inputs drawn from `seed`.
    pub fn new(shape: &ModelShape, device: &B::Device, seed: u64, evict_bytes: usize) -> Self {
        let one_layer = ModelShape {
            layers: 1,
            ..shape.clone()
        };
        Self {
            evict: vec![0; evict_bytes],
            model: init_model(&one_layer, device),
            shape: shape.clone(),
            device: device.clone(),
            rng: SplitMix::new(seed),
        }
    }

    fn random(&mut self, dims: [usize; 3], grad: bool) -> Tensor<B, 3> {
        let len = dims.iter().product();
        let values: Vec<f32> = (0..len).map(|_| self.rng.unit()).collect();
        let tensor = Tensor::from_data(TensorData::new(values, dims), &self.device);
        if grad { tensor.require_grad() } else { tensor }
    }

    fn random_ints(&mut self, n: usize, below: usize) -> Tensor<B, 2, Int> {
        let values: Vec<i64> = (0..n)
            .map(|_| self.rng.below(below as u64) as i64)
            .collect();
        Tensor::from_data(TensorData::new(values, [1, n]), &self.device)
    }

    /// Runs `part` at size `n` once (for attention, `batch` sequences' blocks; the other parts
    /// take `n` rows of one sequence): inputs are built first (not measured), then the forward
    /// pass and the backward pass are timed (each ended by a device sync), and memory is read
    /// from `meter` relative to the live bytes once the inputs exist. `start_together` is
    /// called right before each timed pass (the profiler's copies start each pass at once).
    pub fn run(
        &mut self,
        part: ProfiledPart,
        batch: usize,
        n: usize,
        meter: &dyn MemoryMeter,
        start_together: &dyn Fn(),
    ) -> Result<Run, AttentionError> {
        let forward: Forward<B> = match part {
            ProfiledPart::Embedding => {
                let features = self.random([1, n, self.shape.feature_dim], false);
                let in_degree = self.random_ints(n, self.shape.degree_buckets);
                let out_degree = self.random_ints(n, self.shape.degree_buckets);
                // with an edge encoding: the dense bias of one sequence of n nodes (n² pairs),
                // as the embedding stage computes it once per sequence
                let (hops, edge_dim) = (self.shape.edge_hops(), self.shape.edge_feature_dim);
                let paths = (edge_dim > 0)
                    .then(|| SequenceEdges::draw(&mut self.rng, n, hops.max(1), edge_dim).batch::<B>(1, &self.device));
                Box::new(move |model| {
                    let x = model.input.forward(NodeInput::Features(features))
                        + model.centrality.forward(in_degree, out_degree);
                    let mut loss = x.sum();
                    if let (Some(encoding), Some(paths)) = (&model.edge_encoding, &paths) {
                        loss = loss + encoding.forward(paths)?.sum();
                    }
                    Ok((loss, Vec::new()))
                })
            }
            ProfiledPart::LayerDense => {
                let x = self.random([1, n, self.shape.hidden], true);
                Box::new(move |model| {
                    // a fresh copy: the layer's input is part of what it keeps
                    let (out, kept) = dense_layer(model, x * 1.0);
                    Ok((out.sum(), kept))
                })
            }
            ProfiledPart::Attention => {
                let (heads, head_dim) = (self.shape.heads, self.shape.head_dim());
                // laid out as a layer's projections leave them: `[batch, n, heads, head_dim]`
                // viewed as `[batch, heads, n, head_dim]` (the op's speed depends on the strides)
                let mut qkv = || {
                    self.random([batch * n, heads, head_dim], true)
                        .reshape([batch, n, heads, head_dim])
                        .swap_dims(1, 2)
                };
                let (q, k, v) = (qkv(), qkv(), qkv());
                let buckets =
                    random_buckets(&mut self.rng, batch * n * n, self.shape.distance_buckets);
                let index = DistanceBias::<B>::index_from_u8(buckets, [batch, n, n], &self.device)?;
                let mask = Tensor::<B, 2>::zeros([batch, n], &self.device).equal_elem(1.0);
                // with an edge encoding every layer also reads its `[batch, heads, n, n]` bias
                let dense = (self.shape.edge_feature_dim > 0)
                    .then(|| self.random([batch * heads, n, n], true).reshape([batch, heads, n, n]));
                let block_size = self.shape.key_tile;
                Box::new(move |model| {
                    let bias = AttentionBias {
                        distance: Some(DistanceBias {
                            index: index.into(),
                            table: model.spatial.table.val(),
                            column_offset: 0,
                        }),
                        dense,
                        key_padding_mask: Some(mask),
                    };
                    let options = AttentionOptions {
                        scale: None,
                        block_size,
                    };
                    let out = graph_attention(q, k, v, bias, &options)?.output;
                    Ok((out.sum(), Vec::new()))
                })
            }
            ProfiledPart::Head => {
                let x = self.random([1, n, self.shape.hidden], true);
                let labels = self.random_ints(n, self.shape.num_classes);
                let weight = Tensor::<B, 2>::ones([1, n], &self.device);
                Box::new(move |model| {
                    // a fresh copy: the head's input (the last layer's output) is kept
                    let logits = model.classifier.forward(model.norm.forward(x * 1.0));
                    Ok((masked_cross_entropy(logits, labels, weight, n), Vec::new()))
                })
            }
        };
        B::sync(&self.device).ok();
        start_together();
        let base = meter.reset_peak();
        let started = Instant::now();
        let (loss, kept) = forward(&self.model)?;
        B::sync(&self.device).ok();
        let forward_seconds = started.elapsed().as_secs_f64();
        let forward_peak = meter.peak();
        // the runtime runs a layer's backward after every later layer and the head: what the
        // forward pass kept is no longer in the caches once the stage's working set exceeds them
        for (i, byte) in self.evict.iter_mut().enumerate() {
            *byte = byte.wrapping_add(i as u8);
        }
        std::hint::black_box(&self.evict);
        start_together();
        let after_forward = meter.reset_peak();
        let started = Instant::now();
        let grads = loss.backward();
        B::sync(&self.device).ok();
        let backward_seconds = started.elapsed().as_secs_f64();
        let backward_peak = meter.peak();
        drop(grads);
        drop(kept);
        let saved_bytes = after_forward.saturating_sub(base);
        Ok(Run {
            forward_seconds,
            backward_seconds,
            saved_bytes,
            peak_bytes: forward_peak
                .max(backward_peak)
                .saturating_sub(base)
                .max(saved_bytes),
        })
    }
}

/// One layer of `model` with the attention core replaced by `q + k + v` (in the heads layout,
/// as the attention op sees them): layer norms, the Q/K/V/O projections, the FFN and the
/// residuals, as [`GraphTransformerLayer::forward`](megagraph_models::GraphTransformerLayer)
/// and the parallel runtime's layer run them. Returns the output and `q`, `k`, `v`, which the
/// real attention op keeps for its backward pass (the caller keeps them alive until then).
///
/// - `x`: `[batch, n, hidden]`; output: `[batch, n, hidden]`
fn dense_layer<B: ContextParallelBackend>(
    model: &GraphTransformer<B>,
    x: Tensor<B, 3>,
) -> (Tensor<B, 3>, Vec<Tensor<B, 4>>) {
    let layer = &model.layers[0];
    let attention = &layer.attention;
    let normed = layer.attention_norm.forward(x.clone());
    let [batch, n, d_model] = normed.dims();
    let heads = attention.num_heads;
    let split = |t: Tensor<B, 3>| {
        t.reshape([batch, n, heads, d_model / heads])
            .swap_dims(1, 2)
    };
    let q = split(attention.query.forward(normed.clone()));
    let k = split(attention.key.forward(normed.clone()));
    let v = split(attention.value.forward(normed));
    let kept = vec![q.clone(), k.clone(), v.clone()];
    let attended = q + k + v;
    let attended = attention
        .output
        .forward(attended.swap_dims(1, 2).reshape([batch, n, d_model]));
    let x = x + attended;
    let hidden = layer
        .activation
        .forward(layer.ffn_in.forward(layer.ffn_norm.forward(x.clone())));
    (x + layer.ffn_out.forward(hidden), kept)
}
