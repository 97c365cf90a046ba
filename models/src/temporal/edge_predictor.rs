//! Link scores from a pair of embeddings (TGL's `EdgePredictor`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Tensor, backend::Backend};

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
    pub fn forward(&self, src: Tensor<B, 2>, pos_dst: Tensor<B, 2>, neg_dst: Tensor<B, 3>) -> (Tensor<B, 1>, Tensor<B, 2>) {
        let [events, k, _] = neg_dst.dims();
        let src = self.src_fc.forward(src);
        let positive = self.out_fc.forward(relu(src.clone() + self.dst_fc.forward(pos_dst)));
        let negative = self.out_fc.forward(relu(src.unsqueeze_dim::<3>(1) + self.dst_fc.forward(neg_dst)));
        (positive.reshape([events]), negative.reshape([events, k]))
    }
}
