//! [`LabelInput`]: UniMP's masked label prediction (Shi et al. 2021, "Masked Label Prediction:
//! Unified Message Passing Model for Semi-Supervised Classification"), the training side of the
//! model's [`LabelEncoding`](megagraph_models::encoders::LabelEncoding).

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use megagraph_graph::hash::{GOLDEN, splitmix64};

use crate::config::TrainConfig;
use crate::data::SequenceDataset;

/// Which labels a batch shows as input. In a training step each training node shows its label
/// with probability `rate`, and the loss is taken on the training nodes that do not (a node
/// never sees its own label while it is scored); at evaluation every training node shows its
/// label, and the valid and test nodes never do. A node's draw depends only on the step's seed
/// and the node, not on the batch it lands in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LabelInput {
    /// Probability that a training node shows its label in a step, in (0, 1).
    pub rate: f64,
}

/// The labels a training step shows and the positions it scores.
#[derive(Clone, Debug)]
pub struct ShownLabels<B: Backend> {
    /// The class shown at each position, `[batch, seq]`; the class count where none is shown.
    pub shown: Tensor<B, 2, Int>,
    /// 1.0 at the training nodes that do not show their label (the positions the loss
    /// scores), else 0.0, `[batch, seq]`.
    pub scored: Tensor<B, 2>,
    /// Number of scored positions.
    pub scored_nodes: usize,
}

impl LabelInput {
    /// The label input `config` asks for (`model.label_input`), or `None` when it is off.
    pub fn from_config(config: &TrainConfig) -> Option<Self> {
        config.model.label_input.then_some(Self {
            rate: config.training.label_input_rate,
        })
    }

    /// Whether the training node `node` shows its label in the step seeded `seed`.
    pub fn shows(&self, node: u32, seed: u64) -> bool {
        unit_draw(seed, node) < self.rate
    }

    /// The labels a training step seeded `seed` shows over `nodes` (row-major `shape`,
    /// `None` = padding) of `data`, and the positions it scores.
    pub fn training<B: Backend>(
        &self,
        data: &SequenceDataset,
        nodes: &[Option<u32>],
        shape: [usize; 2],
        seed: u64,
        device: &B::Device,
    ) -> ShownLabels<B> {
        let unknown = data.dataset.num_classes as i64;
        let mut shown = vec![unknown; nodes.len()];
        let mut scored = vec![0.0f32; nodes.len()];
        for (slot, node) in nodes.iter().enumerate() {
            let Some(node) = *node else { continue };
            if !data.is_train_node(node) {
                continue;
            }
            if self.shows(node, seed) {
                shown[slot] = data.dataset.labels[node as usize];
            } else {
                scored[slot] = 1.0;
            }
        }
        let scored_nodes = scored.iter().filter(|&&w| w > 0.0).count();
        ShownLabels {
            shown: Tensor::from_data(TensorData::new(shown, shape), device),
            scored: Tensor::from_data(TensorData::new(scored, shape), device),
            scored_nodes,
        }
    }

    /// The labels an evaluation batch shows over `nodes` (row-major `shape`): every training
    /// node's, and the class count (no label) elsewhere.
    pub fn evaluation<B: Backend>(data: &SequenceDataset, nodes: &[Option<u32>], shape: [usize; 2], device: &B::Device) -> Tensor<B, 2, Int> {
        let unknown = data.dataset.num_classes as i64;
        let shown: Vec<i64> = nodes
            .iter()
            .map(|node| match *node {
                Some(node) if data.is_train_node(node) => data.dataset.labels[node as usize],
                _ => unknown,
            })
            .collect();
        Tensor::from_data(TensorData::new(shown, shape), device)
    }
}

/// A uniform draw in [0, 1) keyed by `seed` and `node` (SplitMix64's output function over both).
fn unit_draw(seed: u64, node: u32) -> f64 {
    let z = splitmix64((seed ^ u64::from(node).wrapping_mul(GOLDEN)).wrapping_add(GOLDEN));
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_and_depend_on_the_seed() {
        let input = LabelInput { rate: 0.3 };
        let shown = (0..20_000u32).filter(|&node| input.shows(node, 7)).count();
        let fraction = shown as f64 / 20_000.0;
        assert!((fraction - 0.3).abs() < 0.015, "{fraction}");
        let same = (0..20_000u32).filter(|&node| input.shows(node, 7) == input.shows(node, 8)).count();
        // independent draws agree with probability 0.3² + 0.7² = 0.58
        assert!((same as f64 / 20_000.0 - 0.58).abs() < 0.02, "{same}");
    }
}
