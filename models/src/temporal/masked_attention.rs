//! The attention core shared by the temporal modules: each row's query attends over its own
//! short list of keys (neighbours, mails, snapshots), some of them padding.

use burn::tensor::activation::{leaky_relu, softmax};
use burn::tensor::{Bool, Tensor, backend::Backend};

use crate::dropout::FastDropout;

/// The logit given to padded keys before the softmax: far below any real logit, yet finite in
/// `f32`, so a row whose keys are all padding gets uniform weights (then zeroed), never NaN.
const PADDING_LOGIT: f32 = -1.0e30;

/// Checks that a width `dim` (named `field`) splits into `heads` heads.
///
/// # Panics
///
/// If `heads` is 0 or does not divide `dim`.
pub(crate) fn check_heads(field: &str, dim: usize, heads: usize) {
    assert!(
        heads > 0 && dim.is_multiple_of(heads),
        "{field} ({dim}) must be a multiple of att_head ({heads})"
    );
}

/// Softmax over dim 1 of `logits` `[rows, keys, heads]` that gives padded keys (`padding`
/// `[rows, keys]`, `true` = padding) weight 0. A row with only padding gets all-zero weights.
pub(crate) fn masked_softmax<B: Backend>(
    logits: Tensor<B, 3>,
    padding: Tensor<B, 2, Bool>,
) -> Tensor<B, 3> {
    let [rows, keys, heads] = logits.dims();
    let padding = padding.reshape([rows, keys, 1]).expand([rows, keys, heads]);
    let keep = padding.clone().bool_not().float();
    softmax(logits.mask_fill(padding, PADDING_LOGIT), 1) * keep
}

/// Multi-head attention of one query per row over that row's keys, TGL style: logits
/// `LeakyReLU_0.2(q·k)` per head (no `1/sqrt(d)` scale), a masked softmax over the keys, dropout
/// on the weights, and the weighted sum of the values.
///
/// - `query`: `[rows, dim]`, `key` and `value`: `[rows, keys, dim]`, `dim = heads · head_dim`
/// - `padding`: `[rows, keys]`, `true` for keys to ignore
/// - output: `[rows, dim]`, zero for rows whose keys are all padding
pub(crate) fn attend_keys<B: Backend>(
    query: Tensor<B, 2>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    padding: Tensor<B, 2, Bool>,
    heads: usize,
    dropout: &FastDropout,
) -> Tensor<B, 2> {
    let [rows, keys, dim] = key.dims();
    let head_dim = dim / heads;
    let query = query.reshape([rows, 1, heads, head_dim]);
    let key = key.reshape([rows, keys, heads, head_dim]);
    let logits: Tensor<B, 3> = (query * key).sum_dim(3).squeeze_dim(3);
    let weights = dropout.forward(masked_softmax(leaky_relu(logits, 0.2), padding));
    let value = value.reshape([rows, keys, heads, head_dim]);
    let weighted = value * weights.unsqueeze_dim::<4>(3);
    weighted.sum_dim(1).reshape([rows, dim])
}
