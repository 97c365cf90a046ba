//! APAN's memory updater: the memory attends over the node's mailbox (TGL's
//! `TransformerMemoryUpdater`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Tensor, backend::Backend};

use super::masked_attention::attend_keys;
use super::{MailRows, TimeEncode, TimeEncodeConfig};

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
    pub dropout: Dropout,
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
        assert!(
            self.att_head > 0 && self.dim_memory.is_multiple_of(self.att_head),
            "dim_memory ({}) must be a multiple of att_head ({})",
            self.dim_memory,
            self.att_head
        );
        let dim_in = self.dim_mail + self.dim_time;
        TransformerMemoryUpdater {
            query: LinearConfig::new(self.dim_memory, self.dim_memory).init(device),
            key: LinearConfig::new(dim_in, self.dim_memory).init(device),
            value: LinearConfig::new(dim_in, self.dim_memory).init(device),
            layer_norm: LayerNormConfig::new(self.dim_memory).init(device),
            output: LinearConfig::new(self.dim_memory, self.dim_memory).init(device),
            time_encode: TimeEncodeConfig::new(self.dim_time).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
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
    pub fn forward(&self, memory: Tensor<B, 2>, mail: MailRows<B>, time: Tensor<B, 1>) -> Tensor<B, 2> {
        let age = time.unsqueeze_dim::<2>(1) - mail.time;
        let input = Tensor::cat(vec![mail.mails, self.time_encode.forward(age)], 2);
        let attended = attend_keys(
            self.query.forward(memory.clone()),
            self.key.forward(input.clone()),
            self.value.forward(input),
            mail.padding,
            self.att_head,
            &self.dropout,
        );
        let normed = self.layer_norm.forward(attended + memory);
        relu(self.dropout.forward(self.output.forward(normed)))
    }
}
