//! One layer of temporal graph attention (TGAT, TGN; TGL's `TransfomerAttentionLayer`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Bool, Tensor, backend::Backend};

use super::flat_linear::forward_flat;
use super::masked_attention::{attend_keys, check_heads};
use super::{TimeEncode, TimeEncodeConfig};
use crate::dropout::{FastDropout, FastDropoutConfig};

/// Configuration of a [`TemporalAttentionLayer`].
#[derive(Config, Debug)]
pub struct TemporalAttentionLayerConfig {
    /// Width of the node representations read (roots and neighbours).
    pub dim_node: usize,
    /// Width of the edge features; 0 for none.
    pub dim_edge: usize,
    /// Width of the time encoding. Default: 100.
    #[config(default = 100)]
    pub dim_time: usize,
    /// Output width; a multiple of `att_head`. Default: 100.
    #[config(default = 100)]
    pub dim_out: usize,
    /// Attention heads. Default: 2.
    #[config(default = 2)]
    pub att_head: usize,
    /// Dropout on the attention weights and on the output. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
}

/// Temporal graph attention of each root over its sampled neighbours:
///
/// ```text
/// q   = W_q [h_root || TimeEncode(0)]
/// k_j = W_k [h_j || e_j || TimeEncode(t_root − t_j)],  v_j = W_v [same]
/// a   = Σ_j softmax_j(LeakyReLU(q·k_j)) v_j          (per head; padded neighbours masked)
/// out = LayerNorm(ReLU(dropout(W_o [a || h_root])))
/// ```
///
/// `t_j` is the time of the edge to neighbour `j`. A root with no neighbour gets `a = 0`, so its
/// output depends on `h_root` alone.
#[derive(Module, Debug)]
pub struct TemporalAttentionLayer<B: Backend> {
    /// `W_q`, `dim_node + dim_time → dim_out`.
    pub query: Linear<B>,
    /// `W_k`, `dim_node + dim_edge + dim_time → dim_out`.
    pub key: Linear<B>,
    /// `W_v`, `dim_node + dim_edge + dim_time → dim_out`.
    pub value: Linear<B>,
    /// `W_o`, `dim_out + dim_node → dim_out`.
    pub output: Linear<B>,
    /// Norm of the output, `dim_out`.
    pub layer_norm: LayerNorm<B>,
    /// Encoding of edge ages.
    pub time_encode: TimeEncode<B>,
    /// Dropout on the attention weights and the output.
    pub dropout: FastDropout,
    /// Number of heads.
    pub att_head: usize,
}

impl TemporalAttentionLayerConfig {
    /// Initializes a [`TemporalAttentionLayer`] on `device`.
    ///
    /// # Panics
    ///
    /// If `dim_out` is not a multiple of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> TemporalAttentionLayer<B> {
        check_heads("dim_out", self.dim_out, self.att_head);
        let dim_key = self.dim_node + self.dim_edge + self.dim_time;
        TemporalAttentionLayer {
            query: LinearConfig::new(self.dim_node + self.dim_time, self.dim_out).init(device),
            key: LinearConfig::new(dim_key, self.dim_out).init(device),
            value: LinearConfig::new(dim_key, self.dim_out).init(device),
            output: LinearConfig::new(self.dim_out + self.dim_node, self.dim_out).init(device),
            layer_norm: LayerNormConfig::new(self.dim_out).init(device),
            time_encode: TimeEncodeConfig::new(self.dim_time).init(device),
            dropout: FastDropoutConfig::new(self.dropout).init(),
            att_head: self.att_head,
        }
    }
}

impl<B: Backend> TemporalAttentionLayer<B> {
    /// New representations of the roots.
    ///
    /// - `root`: `[roots, dim_node]`
    /// - `neighbours`: `[roots, fanout, dim_node]`
    /// - `edge_feat`: `[roots, fanout, dim_edge]`, `None` when `dim_edge = 0`
    /// - `delta_t`: `t_root − t_edge`, `[roots, fanout]`
    /// - `padding`: `[roots, fanout]`, `true` for slots without a neighbour
    /// - output: `[roots, dim_out]`
    pub fn forward(
        &self,
        root: Tensor<B, 2>,
        neighbours: Tensor<B, 3>,
        edge_feat: Option<Tensor<B, 3>>,
        delta_t: Tensor<B, 2>,
        padding: Tensor<B, 2, Bool>,
    ) -> Tensor<B, 2> {
        let roots = root.dims()[0];
        let query = Tensor::cat(vec![root.clone(), self.time_encode.zero(roots)], 1);
        let mut key = vec![neighbours];
        key.extend(edge_feat);
        key.push(self.time_encode.forward(delta_t));
        let key = Tensor::cat(key, 2);
        let attended = attend_keys(
            self.query.forward(query),
            forward_flat(&self.key, key.clone()),
            forward_flat(&self.value, key),
            padding,
            self.att_head,
            &self.dropout,
        );
        let output = self.output.forward(Tensor::cat(vec![attended, root], 1));
        self.layer_norm.forward(relu(self.dropout.forward(output)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{
        Rng, assert_close, attend64, concat64, layer_norm64, linear64, mask, read, tensor,
        time_encode64, widen,
    };
    use burn::backend::{Autodiff, Flex};

    const ROOTS: usize = 3;
    const FANOUT: usize = 4;
    const DIM_NODE: usize = 5;
    const DIM_EDGE: usize = 2;
    const DIM_OUT: usize = 6;

    /// Root 0 misses its neighbour slot 2, root 1 has no neighbour at all.
    fn padding() -> Vec<bool> {
        (0..ROOTS * FANOUT)
            .map(|i| i == 2 || i / FANOUT == 1)
            .collect()
    }

    fn layer<B: Backend>(device: &B::Device) -> TemporalAttentionLayer<B> {
        TemporalAttentionLayerConfig::new(DIM_NODE, DIM_EDGE)
            .with_dim_time(3)
            .with_dim_out(DIM_OUT)
            .with_att_head(2)
            .with_dropout(0.0)
            .init(device)
    }

    /// The layer in float64: `root` `[ROOTS, DIM_NODE]`, `nbr` `[ROOTS·FANOUT, DIM_NODE]`.
    fn reference<B: Backend>(
        layer: &TemporalAttentionLayer<B>,
        root: &[f64],
        nbr: &[f64],
        edge: &[f64],
        dt: &[f64],
    ) -> Vec<f64> {
        let dim_time = layer.time_encode.dim_time();
        let zero = time_encode64(&layer.time_encode, &[0.0; ROOTS]);
        let query = linear64(&layer.query, &concat64(root, DIM_NODE, &zero, dim_time));
        let key_in = concat64(
            &concat64(nbr, DIM_NODE, edge, DIM_EDGE),
            DIM_NODE + DIM_EDGE,
            &time_encode64(&layer.time_encode, dt),
            dim_time,
        );
        let (key, value) = (
            linear64(&layer.key, &key_in),
            linear64(&layer.value, &key_in),
        );
        let attended = attend64(&query, &key, &value, &padding(), FANOUT, layer.att_head);
        let output: Vec<f64> =
            linear64(&layer.output, &concat64(&attended, DIM_OUT, root, DIM_NODE))
                .into_iter()
                .map(|v| v.max(0.0))
                .collect();
        layer_norm64(&layer.layer_norm, &output)
    }

    #[test]
    fn forward_matches_a_float64_reference_with_padding() {
        let device = Default::default();
        let mut rng = Rng::new();
        let layer = layer::<Flex>(&device);
        let (root, r) = rng.tensor::<Flex, 2>([ROOTS, DIM_NODE], &device);
        let (nbr, n) = rng.tensor::<Flex, 3>([ROOTS, FANOUT, DIM_NODE], &device);
        let (edge, e) = rng.tensor::<Flex, 3>([ROOTS, FANOUT, DIM_EDGE], &device);
        let dt = rng.values(ROOTS * FANOUT, 0.0, 20.0);
        let padding = mask::<Flex, 2>(padding(), [ROOTS, FANOUT], &device);
        let got = read(layer.forward(
            root,
            nbr,
            Some(edge),
            tensor(dt.clone(), [ROOTS, FANOUT], &device),
            padding,
        ));
        assert_close(
            "temporal attention",
            &got,
            &reference(&layer, &r, &n, &e, &widen(&dt)),
            2e-4,
            rng.seed,
        );
    }

    #[test]
    fn gradients_match_finite_differences_of_the_float64_reference() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let mut rng = Rng::new();
        let mut layer = layer::<B>(&device);
        // keep the ReLU open: a root whose outputs all clip has no gradient to compare, and a
        // difference quotient across the kink is no derivative
        layer.output.bias = layer
            .output
            .bias
            .map(|bias| bias.map(|b| b.ones_like() * 4.0));
        let (root, r) = rng.tensor::<B, 2>([ROOTS, DIM_NODE], &device);
        let (nbr, n) = rng.tensor::<B, 3>([ROOTS, FANOUT, DIM_NODE], &device);
        let (edge, e) = rng.tensor::<B, 3>([ROOTS, FANOUT, DIM_EDGE], &device);
        let (weights, c) = rng.tensor::<B, 2>([ROOTS, DIM_OUT], &device);
        let dt = widen(&rng.values(ROOTS * FANOUT, 0.0, 20.0));
        let (root, nbr) = (root.require_grad(), nbr.require_grad());
        let out = layer.forward(
            root.clone(),
            nbr.clone(),
            Some(edge),
            tensor(
                dt.iter().map(|&v| v as f32).collect(),
                [ROOTS, FANOUT],
                &device,
            ),
            mask(padding(), [ROOTS, FANOUT], &device),
        );
        let grads = (out * weights).sum().backward();
        let grad_root = root.grad(&grads).map(read).unwrap_or_default();
        let grad_nbr = nbr.grad(&grads).map(read).unwrap_or_default();

        let loss = |r: &[f64], n: &[f64]| -> f64 {
            reference(&layer, r, n, &e, &dt)
                .iter()
                .zip(&c)
                .map(|(o, w)| o * w)
                .sum()
        };
        let step = 1e-6;
        let central = |x: &[f64], i: usize, at: &dyn Fn(&[f64]) -> f64| {
            let (mut up, mut down) = (x.to_vec(), x.to_vec());
            up[i] += step;
            down[i] -= step;
            (at(&up) - at(&down)) / (2.0 * step)
        };
        let fd_root: Vec<f64> = (0..r.len())
            .map(|i| central(&r, i, &|x| loss(x, &n)))
            .collect();
        let fd_nbr: Vec<f64> = (0..n.len())
            .map(|i| central(&n, i, &|x| loss(&r, x)))
            .collect();
        assert_close("d loss / d root", &grad_root, &fd_root, 2e-3, rng.seed);
        assert_close("d loss / d neighbours", &grad_nbr, &fd_nbr, 2e-3, rng.seed);
        for (slot, padded) in padding().iter().enumerate() {
            let g = &grad_nbr[slot * DIM_NODE..(slot + 1) * DIM_NODE];
            if *padded {
                assert!(
                    g.iter().all(|&v| v == 0.0),
                    "padded slot {slot} got gradient {g:?}"
                );
            } else {
                assert!(g.iter().any(|&v| v != 0.0), "slot {slot} got no gradient");
            }
        }
    }
}
