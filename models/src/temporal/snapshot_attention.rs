//! DySAT's temporal self-attention over a node's snapshot embeddings.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::{relu, softmax};
use burn::tensor::{Tensor, backend::Backend};

use super::flat_linear::forward_flat;
use super::masked_attention::check_heads;
use crate::dropout::{FastDropout, FastDropoutConfig};

/// Configuration of a [`SnapshotAttention`].
#[derive(Config, Debug)]
pub struct SnapshotAttentionConfig {
    /// Width of the snapshot embeddings; a multiple of `att_head`.
    pub dim: usize,
    /// Number of snapshots read. Default: 3.
    #[config(default = 3)]
    pub snapshots: usize,
    /// Heads of the self-attention across snapshots. Default: 2.
    #[config(default = 2)]
    pub att_head: usize,
    /// Dropout on the weights over snapshots. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
}

/// Causal self-attention over a node's `snapshots` embeddings (oldest first), with learned
/// position embeddings; the output is the last (current) snapshot's:
///
/// ```text
/// z_s = x_s + p_s,  q = W_q z_S,  k_s = W_k z_s,  v_s = W_v z_s
/// a   = Σ_s softmax_s(q·k_s / sqrt(head_dim)) v_s + z_S     (per head, concatenated)
/// out = ReLU(W_f a) + a
/// ```
///
/// The causal mask lets the last snapshot see all of them, so only its row is computed.
#[derive(Module, Debug)]
pub struct SnapshotAttention<B: Backend> {
    /// Position embeddings `p`, `[snapshots, dim]`.
    pub position: Param<Tensor<B, 2>>,
    /// `W_q`, `dim → dim`, no bias.
    pub query: Linear<B>,
    /// `W_k`, `dim → dim`, no bias.
    pub key: Linear<B>,
    /// `W_v`, `dim → dim`, no bias.
    pub value: Linear<B>,
    /// `W_f`, `dim → dim`.
    pub feed_forward: Linear<B>,
    /// Dropout on the attention weights.
    pub dropout: FastDropout,
    /// Number of heads.
    pub att_head: usize,
}

impl SnapshotAttentionConfig {
    /// Initializes a [`SnapshotAttention`] on `device`.
    ///
    /// # Panics
    ///
    /// If `dim` is not a multiple of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> SnapshotAttention<B> {
        check_heads("dim", self.dim, self.att_head);
        let projection = || {
            LinearConfig::new(self.dim, self.dim)
                .with_bias(false)
                .init(device)
        };
        let std = 1.0 / (self.dim as f64).sqrt();
        SnapshotAttention {
            position: Initializer::Normal { mean: 0.0, std }
                .init([self.snapshots, self.dim], device),
            query: projection(),
            key: projection(),
            value: projection(),
            feed_forward: LinearConfig::new(self.dim, self.dim).init(device),
            dropout: FastDropoutConfig::new(self.dropout).init(),
            att_head: self.att_head,
        }
    }
}

impl<B: Backend> SnapshotAttention<B> {
    /// - `x`: snapshot embeddings `[rows, snapshots, dim]`, oldest first
    /// - output: `[rows, dim]`
    ///
    /// # Panics
    ///
    /// If `x` does not hold `snapshots` snapshots.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 2> {
        let [rows, snapshots, dim] = x.dims();
        let (heads, head_dim) = (self.att_head, dim / self.att_head);
        let z = x + self.position.val().unsqueeze_dim(0);
        let last = z.clone().narrow(1, snapshots - 1, 1).reshape([rows, dim]);
        let q = self
            .query
            .forward(last.clone())
            .reshape([rows, 1, heads, head_dim]);
        let k = forward_flat(&self.key, z.clone())
            .reshape([rows, snapshots, heads, head_dim]);
        let v = forward_flat(&self.value, z)
            .reshape([rows, snapshots, heads, head_dim]);
        let logits: Tensor<B, 3> = (q * k).sum_dim(3).squeeze_dim(3) / (head_dim as f64).sqrt();
        let weights = self.dropout.forward(softmax(logits, 1));
        let attended = (v * weights.unsqueeze_dim::<4>(3))
            .sum_dim(1)
            .reshape([rows, dim])
            + last;
        relu(self.feed_forward.forward(attended.clone())) + attended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, assert_close, linear64, read, weighted_sum64};
    use burn::backend::Flex;

    #[test]
    fn last_snapshot_matches_a_float64_causal_self_attention() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (rows, snapshots, dim, heads) = (2, 3, 4, 2);
        let attention = SnapshotAttentionConfig::new(dim)
            .with_snapshots(snapshots)
            .with_att_head(heads)
            .with_dropout(0.0)
            .init::<Flex>(&device);
        let (x, x64) = rng.tensor::<Flex, 3>([rows, snapshots, dim], &device);
        let got = read(attention.forward(x));

        let position = read(attention.position.val());
        let z: Vec<f64> = x64
            .iter()
            .enumerate()
            .map(|(i, v)| v + position[i % (snapshots * dim)])
            .collect();
        let last: Vec<f64> = (0..rows)
            .flat_map(|r| {
                z[(r * snapshots + snapshots - 1) * dim..(r * snapshots + snapshots) * dim].to_vec()
            })
            .collect();
        let (q, k, v) = (
            linear64(&attention.query, &last),
            linear64(&attention.key, &z),
            linear64(&attention.value, &z),
        );
        let head_dim = dim / heads;
        let logit = |r: usize, s: usize, h: usize| {
            let (qi, ki) = (
                r * dim + h * head_dim,
                (r * snapshots + s) * dim + h * head_dim,
            );
            let dot: f64 = (0..head_dim).map(|c| q[qi + c] * k[ki + c]).sum();
            Some(dot / (head_dim as f64).sqrt())
        };
        let attended: Vec<f64> = weighted_sum64(&v, rows, snapshots, heads, logit)
            .iter()
            .zip(&last)
            .map(|(a, l)| a + l)
            .collect();
        let want: Vec<f64> = linear64(&attention.feed_forward, &attended)
            .iter()
            .zip(&attended)
            .map(|(f, a)| f.max(0.0) + a)
            .collect();
        assert_close("snapshot attention", &got, &want, 1e-5, rng.seed);
    }
}
