//! Exact merge of attention results over disjoint key blocks.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::error::check_dims;
use crate::{AttentionError, AttentionOutput};

/// Combines [`AttentionOutput`]s of the same queries over disjoint key blocks into the result
/// over their union, exactly:
/// `lse = log Σ_p e^(lse_p)`, `output = Σ_p e^(lse_p − lse) · output_p`.
///
/// Built from plain tensor ops, so it is differentiable on any autodiff backend. The reference
/// maximum subtracted for stability is detached: the result does not depend on it, so the
/// gradient is exact. Blocks whose rows saw no key (`lse = -inf`) contribute nothing; a row
/// that no block saw stays `output = 0`, `lse = -inf`, with zero (finite) gradients.
///
/// - `parts`: each `output [batch, heads, q_len, head_dim]`, `lse [batch, heads, q_len]`
///
/// # Errors
///
/// [`AttentionError::NoPartials`] for an empty list, [`AttentionError::ShapeMismatch`] when a
/// part's shapes differ from the first part's.
pub fn merge_partials<B: Backend>(
    parts: Vec<AttentionOutput<B>>,
) -> Result<AttentionOutput<B>, AttentionError> {
    let Some(first) = parts.first() else {
        return Err(AttentionError::NoPartials);
    };
    let [batch, heads, q_len, head_dim] = first.output.dims();
    let expected = [
        ("batch", batch),
        ("heads", heads),
        ("q_len", q_len),
        ("head_dim", head_dim),
    ];
    for part in &parts {
        check_dims("parts[].output", &part.output.dims(), &expected)?;
        check_dims("parts[].lse", &part.lse.dims(), &expected[..3])?;
    }
    if parts.len() == 1 {
        return parts.into_iter().next().ok_or(AttentionError::NoPartials);
    }

    let (outputs, lses): (Vec<_>, Vec<_>) = parts.into_iter().map(|p| (p.output, p.lse)).unzip();
    // [parts, batch, heads, q_len]
    let lse_all: Tensor<B, 4> = Tensor::stack(lses, 0);
    let max = lse_all.clone().max_dim(0).detach().clamp_min(f32::MIN);
    let weights = (lse_all - max.clone()).exp();
    let total = weights.clone().sum_dim(0);
    let unseen = total.clone().equal_elem(0.0);
    let total_safe = total.mask_fill(unseen.clone(), 1.0);
    let lse = (total_safe.clone().log() + max).mask_fill(unseen, f32::NEG_INFINITY);
    let weights = weights / total_safe;
    let mut output: Option<Tensor<B, 4>> = None;
    for (p, part) in outputs.into_iter().enumerate() {
        let w = weights
            .clone()
            .slice([p..p + 1, 0..batch, 0..heads, 0..q_len])
            .reshape([batch, heads, q_len, 1]);
        let term = part * w;
        output = Some(match output {
            Some(acc) => acc + term,
            None => term,
        });
    }
    let output = output.ok_or(AttentionError::NoPartials)?;
    Ok(AttentionOutput {
        output,
        lse: lse.reshape([batch, heads, q_len]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;

    type B = Flex;

    #[test]
    fn empty_list_is_an_error() {
        assert_eq!(
            merge_partials::<B>(Vec::new()).err(),
            Some(AttentionError::NoPartials)
        );
    }

    #[test]
    fn mismatched_parts_are_an_error() {
        let device = Default::default();
        let part = |q_len: usize| AttentionOutput::<B> {
            output: Tensor::zeros([1, 2, q_len, 4], &device),
            lse: Tensor::zeros([1, 2, q_len], &device),
        };
        let err = merge_partials(vec![part(3), part(5)]).err();
        assert!(matches!(
            err,
            Some(AttentionError::ShapeMismatch {
                dim: "q_len",
                expected: 3,
                actual: 5,
                ..
            })
        ));
    }

    #[test]
    fn unseen_rows_stay_zero_with_neg_inf_lse() {
        let device = Default::default();
        let part = |lse: f32, value: f32| AttentionOutput::<B> {
            output: Tensor::full([1, 1, 2, 3], value, &device),
            lse: Tensor::from_data([[[lse, f32::NEG_INFINITY]]], &device),
        };
        let merged = merge_partials(vec![part(0.0, 1.0), part(f32::NEG_INFINITY, 0.0)])
            .map_err(|e| e.to_string());
        let merged = merged.unwrap_or_else(|e| panic!("{e}"));
        let lse = merged.lse.into_data().to_vec::<f32>().unwrap_or_default();
        assert_eq!(lse, vec![0.0, f32::NEG_INFINITY]);
        let out = merged
            .output
            .into_data()
            .to_vec::<f32>()
            .unwrap_or_default();
        assert!(out.iter().all(|x| x.is_finite()));
        // row 0: only part 0 saw keys (weight 1); row 1: nothing, but the outputs of both parts
        // were given as constant per part, so row 1 is 0 (unseen)
        assert_eq!(&out[..3], &[1.0, 1.0, 1.0]);
        assert_eq!(&out[3..], &[0.0, 0.0, 0.0]);
    }
}
