//! DySAT's structural attention: a GAT layer over one snapshot's neighbours.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::{elu, leaky_relu};
use burn::tensor::{Bool, Tensor, TensorData, backend::Backend};

use super::flat_linear::forward_flat;
use super::masked_attention::{check_heads, masked_softmax};
use crate::dropout::{FastDropout, FastDropoutConfig};

/// Configuration of a [`StructuralAttention`].
#[derive(Config, Debug)]
pub struct StructuralAttentionConfig {
    /// Width of the input node representations.
    pub dim_in: usize,
    /// Output width; a multiple of `att_head`.
    pub dim_out: usize,
    /// GAT heads, their outputs concatenated.
    pub att_head: usize,
    /// Dropout on the attention coefficients `α`.
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
    pub dropout: FastDropout,
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
            dropout: FastDropoutConfig::new(self.dropout).init(),
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
                forward_flat(&self.weight, neighbours),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, assert_close, linear64, mask, read, weighted_sum64};
    use burn::backend::Flex;

    #[test]
    fn gat_matches_a_float64_reference_with_padding() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (rows, fanout, dim_in, dim_out, heads) = (3, 3, 4, 6, 2);
        let gat = StructuralAttentionConfig::new(dim_in, dim_out, heads, 0.0).init::<Flex>(&device);
        let (root, r) = rng.tensor::<Flex, 2>([rows, dim_in], &device);
        let (nbr, n) = rng.tensor::<Flex, 3>([rows, fanout, dim_in], &device);
        // row 1 has no neighbour: it attends to itself alone
        let padding: Vec<bool> = (0..rows * fanout)
            .map(|i| i / fanout == 1 || i == 7)
            .collect();
        let got = read(gat.forward(root, nbr, mask(padding.clone(), [rows, fanout], &device)));

        // keys per row: the root itself, then its neighbours
        let (zr, zn) = (linear64(&gat.weight, &r), linear64(&gat.weight, &n));
        let z: Vec<f64> = (0..rows)
            .flat_map(|i| {
                [
                    &zr[i * dim_out..(i + 1) * dim_out],
                    &zn[i * fanout * dim_out..(i + 1) * fanout * dim_out],
                ]
                .concat()
            })
            .collect();
        let (a_self, a_nbr) = (
            read(gat.attention_self.val()),
            read(gat.attention_neighbour.val()),
        );
        let head_dim = dim_out / heads;
        let dot = |a: &[f64], row: usize, key: usize, h: usize| -> f64 {
            let at = (row * (fanout + 1) + key) * dim_out + h * head_dim;
            (0..head_dim).map(|c| a[h * head_dim + c] * z[at + c]).sum()
        };
        let logit = |row: usize, key: usize, h: usize| {
            let s = dot(&a_self, row, 0, h) + dot(&a_nbr, row, key, h);
            (key == 0 || !padding[row * fanout + key - 1]).then_some(if s > 0.0 {
                s
            } else {
                0.2 * s
            })
        };
        let want: Vec<f64> = weighted_sum64(&z, rows, fanout + 1, heads, logit)
            .into_iter()
            .map(|x| if x > 0.0 { x } else { x.exp() - 1.0 })
            .collect();
        assert_close("GAT", &got, &want, 1e-5, rng.seed);
    }
}
