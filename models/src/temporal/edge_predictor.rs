//! Link scores from a pair of embeddings (TGL's `EdgePredictor`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Tensor, backend::Backend};

use super::flat_linear::forward_flat;

/// Configuration of an [`EdgePredictor`].
#[derive(Config, Debug)]
pub struct EdgePredictorConfig {
    /// Width of the node embeddings.
    pub dim_in: usize,
}

/// `logit(s, d) = out(ReLU(src_fc(h_s) + dst_fc(h_d)))`.
#[derive(Module, Debug)]
pub struct EdgePredictor<B: Backend> {
    /// `src_fc`, `dim_in → dim_in`.
    pub src_fc: Linear<B>,
    /// `dst_fc`, `dim_in → dim_in`.
    pub dst_fc: Linear<B>,
    /// `out`, `dim_in → 1`.
    pub out_fc: Linear<B>,
}

impl EdgePredictorConfig {
    /// Initializes an [`EdgePredictor`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> EdgePredictor<B> {
        EdgePredictor {
            src_fc: LinearConfig::new(self.dim_in, self.dim_in).init(device),
            dst_fc: LinearConfig::new(self.dim_in, self.dim_in).init(device),
            out_fc: LinearConfig::new(self.dim_in, 1).init(device),
        }
    }
}

impl<B: Backend> EdgePredictor<B> {
    /// Logits of the positive pairs and of `k` negative destinations per positive.
    ///
    /// - `src`: source embeddings `[events, dim_in]`
    /// - `pos_dst`: destination embeddings `[events, dim_in]`
    /// - `neg_dst`: negative destinations `[events, k, dim_in]`
    /// - output: `([events], [events, k])`
    pub fn forward(
        &self,
        src: Tensor<B, 2>,
        pos_dst: Tensor<B, 2>,
        neg_dst: Tensor<B, 3>,
    ) -> (Tensor<B, 1>, Tensor<B, 2>) {
        let [events, k, _] = neg_dst.dims();
        let src = self.src_fc.forward(src);
        let positive = self
            .out_fc
            .forward(relu(src.clone() + self.dst_fc.forward(pos_dst)));
        let negative = forward_flat(
            &self.out_fc,
            relu(src.unsqueeze_dim::<3>(1) + forward_flat(&self.dst_fc, neg_dst)),
        );
        (positive.reshape([events]), negative.reshape([events, k]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, assert_close, linear64, read};
    use burn::backend::Flex;

    #[test]
    fn logits_match_a_float64_reference() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (events, k, dim) = (4, 3, 6);
        let predictor = EdgePredictorConfig::new(dim).init::<Flex>(&device);
        let (src, s) = rng.tensor::<Flex, 2>([events, dim], &device);
        let (pos, p) = rng.tensor::<Flex, 2>([events, dim], &device);
        let (neg, n) = rng.tensor::<Flex, 3>([events, k, dim], &device);
        let (positive, negative) = predictor.forward(src, pos, neg);

        let (hs, hp, hn) = (
            linear64(&predictor.src_fc, &s),
            linear64(&predictor.dst_fc, &p),
            linear64(&predictor.dst_fc, &n),
        );
        let score = |a: &[f64], b: &[f64]| -> f64 {
            let hidden: Vec<f64> = a.iter().zip(b).map(|(x, y)| (x + y).max(0.0)).collect();
            linear64(&predictor.out_fc, &hidden)[0]
        };
        let row = |x: &[f64], i: usize| x[i * dim..(i + 1) * dim].to_vec();
        let want_pos: Vec<f64> = (0..events)
            .map(|e| score(&row(&hs, e), &row(&hp, e)))
            .collect();
        let want_neg: Vec<f64> = (0..events * k)
            .map(|i| score(&row(&hs, i / k), &row(&hn, i)))
            .collect();
        assert_close(
            "positive logits",
            &read(positive),
            &want_pos,
            1e-5,
            rng.seed,
        );
        assert_close(
            "negative logits",
            &read(negative),
            &want_neg,
            1e-5,
            rng.seed,
        );
    }
}
