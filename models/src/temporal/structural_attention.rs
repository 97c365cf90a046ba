//! DySAT's structural attention: a GAT layer over one snapshot's neighbours.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Initializer, Linear, LinearConfig};
use burn::tensor::activation::{elu, leaky_relu};
use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use super::masked_attention::{check_heads, masked_softmax};

/// Configuration of a [`StructuralAttention`].
#[derive(Config, Debug)]
pub struct StructuralAttentionConfig {
    /// Width of the input node representations.
    pub dim_in: usize,
    /// Output width; a multiple of `att_head`.
    pub dim_out: usize,
    /// GAT heads, their outputs concatenated. Default: 2.
    #[config(default = 2)]
    pub att_head: usize,
    /// Dropout on the attention coefficients `α`. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
}

/// Graph attention (GAT) of each root over itself and its neighbours in one snapshot:
///
/// ```text
/// z_j = W h_j,   α_j = softmax_j(LeakyReLU(a_self·z_root + a_nbr·z_j))   (j ∈ {root} ∪ neighbours)
/// out = ELU(Σ_j α_j z_j)                                                  (per head, concatenated)
/// ```
#[derive(Module, Debug)]
pub struct StructuralAttention<B: Backend> {
    /// `W`, `dim_in → dim_out`, no bias.
    pub weight: Linear<B>,
    /// `a_self` per head, `[att_head, dim_out / att_head]`.
    pub attention_self: Param<Tensor<B, 2>>,
    /// `a_nbr` per head, `[att_head, dim_out / att_head]`.
    pub attention_neighbour: Param<Tensor<B, 2>>,
    /// Dropout on the attention weights.
    pub dropout: Dropout,
}

impl StructuralAttentionConfig {
    /// Initializes a [`StructuralAttention`] on `device`.
    ///
    /// # Panics
    ///
    /// If `dim_out` is not a multiple of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> StructuralAttention<B> {
        check_heads("dim_out", self.dim_out, self.att_head);
        let head_dim = self.dim_out / self.att_head;
        let vector = Initializer::Normal {
            mean: 0.0,
            std: 1.0 / (head_dim as f64).sqrt(),
        };
        StructuralAttention {
            weight: LinearConfig::new(self.dim_in, self.dim_out)
                .with_bias(false)
                .init(device),
            attention_self: vector.init([self.att_head, head_dim], device),
            attention_neighbour: vector.init([self.att_head, head_dim], device),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

impl<B: Backend> StructuralAttention<B> {
    /// - `root`: `[rows, dim_in]`
    /// - `neighbours`: `[rows, fanout, dim_in]`
    /// - `padding`: `[rows, fanout]`, `true` for slots without a neighbour
    /// - output: `[rows, dim_out]`
    pub fn forward(
        &self,
        root: Tensor<B, 2>,
        neighbours: Tensor<B, 3>,
        padding: Tensor<B, 2, Bool>,
    ) -> Tensor<B, 2> {
        let [heads, head_dim] = self.attention_self.dims();
        let [rows, fanout, _] = neighbours.dims();
        let keys = Tensor::cat(
            vec![
                self.weight.forward(root).unsqueeze_dim(1),
                self.weight.forward(neighbours),
            ],
            1,
        )
        .reshape([rows, fanout + 1, heads, head_dim]);
        let score = |z: Tensor<B, 4>, a: &Param<Tensor<B, 2>>| -> Tensor<B, 3> {
            (z * a.val().reshape([1, 1, heads, head_dim]))
                .sum_dim(3)
                .squeeze_dim(3)
        };
        let self_score = score(keys.clone().narrow(1, 0, 1), &self.attention_self);
        let logits = leaky_relu(
            self_score + score(keys.clone(), &self.attention_neighbour),
            0.2,
        );
        let device = padding.device();
        let padding = Tensor::cat(
            vec![
                Tensor::<B, 2, Bool>::from_data(
                    TensorData::new(vec![false; rows], [rows, 1]),
                    &device,
                ),
                padding,
            ],
            1,
        );
        let weights = self.dropout.forward(masked_softmax(logits, padding));
        elu(
            (keys * weights.unsqueeze_dim::<4>(3))
                .sum_dim(1)
                .reshape([rows, heads * head_dim]),
            1.0,
        )
    }
}
