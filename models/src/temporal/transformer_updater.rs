//! APAN's memory updater: the memory attends over the node's mailbox (TGL's
//! `TransformerMemoryUpdater`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Tensor, backend::Backend};

use super::flat_linear::forward_flat;
use super::masked_attention::{attend_keys, check_heads};
use super::{MailRows, TimeEncode, TimeEncodeConfig};
use crate::dropout::{FastDropout, FastDropoutConfig};

/// Configuration of a [`TransformerMemoryUpdater`].
#[derive(Config, Debug)]
pub struct TransformerMemoryUpdaterConfig {
    /// Mail width (`2·dim_memory + dim_edge`).
    pub dim_mail: usize,
    /// Memory width; a multiple of `att_head`.
    pub dim_memory: usize,
    /// Width of the time encoding of each mail's age. Default: 100.
    #[config(default = 100)]
    pub dim_time: usize,
    /// Attention heads (TGL's `att_head`). Default: 2.
    #[config(default = 2)]
    pub att_head: usize,
    /// Dropout on the attention weights and on the output. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
}

/// The memory attends over its node's mails:
///
/// ```text
/// q = W_q h,  k_j = W_k [mail_j || TimeEncode(t − t_j)],  v_j = W_v [mail_j || TimeEncode(t − t_j)]
/// a = Σ_j softmax_j(LeakyReLU(q·k_j)) v_j          (per head, empty slots masked)
/// h' = ReLU(dropout(W_o LayerNorm(a + h)))
/// ```
///
/// A node with no mail yet gets `a = 0`.
#[derive(Module, Debug)]
pub struct TransformerMemoryUpdater<B: Backend> {
    /// `W_q`, `dim_memory → dim_memory`.
    pub query: Linear<B>,
    /// `W_k`, `dim_mail + dim_time → dim_memory`.
    pub key: Linear<B>,
    /// `W_v`, `dim_mail + dim_time → dim_memory`.
    pub value: Linear<B>,
    /// Norm of the residual sum, `dim_memory`.
    pub layer_norm: LayerNorm<B>,
    /// `W_o`, `dim_memory → dim_memory`.
    pub output: Linear<B>,
    /// Encoding of each mail's age.
    pub time_encode: TimeEncode<B>,
    /// Dropout on the attention weights and the output.
    pub dropout: FastDropout,
    /// Number of heads.
    pub att_head: usize,
}

impl TransformerMemoryUpdaterConfig {
    /// Initializes a [`TransformerMemoryUpdater`] on `device`.
    ///
    /// # Panics
    ///
    /// If `dim_memory` is not a multiple of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> TransformerMemoryUpdater<B> {
        check_heads("dim_memory", self.dim_memory, self.att_head);
        let dim_in = self.dim_mail + self.dim_time;
        TransformerMemoryUpdater {
            query: LinearConfig::new(self.dim_memory, self.dim_memory).init(device),
            key: LinearConfig::new(dim_in, self.dim_memory).init(device),
            value: LinearConfig::new(dim_in, self.dim_memory).init(device),
            layer_norm: LayerNormConfig::new(self.dim_memory).init(device),
            output: LinearConfig::new(self.dim_memory, self.dim_memory).init(device),
            time_encode: TimeEncodeConfig::new(self.dim_time).init(device),
            dropout: FastDropoutConfig::new(self.dropout).init(),
            att_head: self.att_head,
        }
    }
}

impl<B: Backend> TransformerMemoryUpdater<B> {
    /// The new memory rows.
    ///
    /// - `memory`: current memory `[rows, dim_memory]`
    /// - `mail`: each row's mailbox (`[rows, mailbox_size, dim_mail]`, times and padding)
    /// - `time`: the time each row is read at `[rows]`; a mail's age is `time − its time`
    /// - output: `[rows, dim_memory]`
    pub fn forward(
        &self,
        memory: Tensor<B, 2>,
        mail: MailRows<B>,
        time: Tensor<B, 1>,
    ) -> Tensor<B, 2> {
        let age = time.unsqueeze_dim::<2>(1) - mail.time;
        let input = Tensor::cat(vec![mail.mails, self.time_encode.forward(age)], 2);
        let attended = attend_keys(
            self.query.forward(memory.clone()),
            forward_flat(&self.key, input.clone()),
            forward_flat(&self.value, input),
            mail.padding,
            self.att_head,
            &self.dropout,
        );
        let normed = self.layer_norm.forward(attended + memory);
        relu(self.dropout.forward(self.output.forward(normed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{
        Rng, assert_close, attend64, concat64, layer_norm64, linear64, mask, read, tensor,
        time_encode64,
    };
    use burn::backend::Flex;

    #[test]
    fn update_matches_a_float64_reference_with_empty_slots() {
        let device = Default::default();
        let mut rng = Rng::new();
        let (rows, size, dim_mail, dim_memory, dim_time, heads) = (3, 4, 5, 6, 3, 2);
        let updater = TransformerMemoryUpdaterConfig::new(dim_mail, dim_memory)
            .with_dim_time(dim_time)
            .with_att_head(heads)
            .with_dropout(0.0)
            .init::<Flex>(&device);
        let (memory, h) = rng.tensor::<Flex, 2>([rows, dim_memory], &device);
        let (mails, m) = rng.tensor::<Flex, 3>([rows, size, dim_mail], &device);
        let mail_time = rng.values(rows * size, 0.0, 10.0);
        let time = rng.values(rows, 10.0, 20.0);
        // row 0 holds 2 mails, row 1 none, row 2 a full mailbox
        let padding: Vec<bool> = (0..rows * size)
            .map(|i| (i / size == 0 && i % size >= 2) || i / size == 1)
            .collect();
        let mail = MailRows {
            mails,
            time: tensor(mail_time.clone(), [rows, size], &device),
            padding: mask(padding.clone(), [rows, size], &device),
        };
        let got = read(updater.forward(memory, mail, tensor(time.clone(), [rows], &device)));

        let age: Vec<f64> = (0..rows * size)
            .map(|i| f64::from(time[i / size]) - f64::from(mail_time[i]))
            .collect();
        let input = concat64(
            &m,
            dim_mail,
            &time_encode64(&updater.time_encode, &age),
            dim_time,
        );
        let attended = attend64(
            &linear64(&updater.query, &h),
            &linear64(&updater.key, &input),
            &linear64(&updater.value, &input),
            &padding,
            size,
            heads,
        );
        let residual: Vec<f64> = attended.iter().zip(&h).map(|(a, b)| a + b).collect();
        let normed = layer_norm64(&updater.layer_norm, &residual);
        let want: Vec<f64> = linear64(&updater.output, &normed)
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        assert_close("APAN memory", &got, &want, 2e-4, rng.seed);
    }
}
