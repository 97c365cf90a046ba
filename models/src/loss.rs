use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, backend::Backend};

/// Node-classification loss: cross-entropy summed over the positions whose `weight` is 1 and
/// divided by `count`, the number of such positions in the whole step. Passing the step's total
/// lets partial batches (micro-batches, context blocks, replicas) sum to the full-batch loss.
///
/// - `logits`: `[batch, seq, classes]`; `labels`, `weight`: `[batch, seq]`
/// - output: `[1]`
pub fn masked_cross_entropy<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
    weight: Tensor<B, 2>,
    count: usize,
) -> Tensor<B, 1> {
    let picked = log_softmax(logits, 2)
        .gather(2, labels.unsqueeze_dim(2))
        .squeeze_dim::<2>(2);
    (picked * weight).sum().neg() / count.max(1) as f64
}
