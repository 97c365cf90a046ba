//! Unit tests of the reference implementation of the attention op.

use super::*;
use burn::backend::Flex;
use burn::tensor::{Distribution, TensorData};

type B = Flex;

/// Random inputs with every kind of bias and a fully masked batch element.
fn inputs(batch: usize, heads: usize, n: usize) -> GraphAttentionInputs<B> {
    let device = Default::default();
    let random = |dims: [usize; 4]| {
        primitive(Tensor::<B, 4>::random(
            dims,
            Distribution::Normal(0.0, 1.0),
            &device,
        ))
    };
    let buckets: Vec<i64> = (0..batch * n * n).map(|i| ((i * 7) % 5) as i64).collect();
    let mask: Vec<bool> = (0..batch * n)
        .map(|i| i / n == 1 || (i % n) % 3 == 2)
        .collect();
    GraphAttentionInputs {
        q: random([batch, heads, n, 4]),
        k: random([batch, heads, n, 4]),
        v: random([batch, heads, n, 4]),
        distance: Some(DistanceBiasPrimitive {
            index: BucketIndexPrimitive::Dense(
                Tensor::<B, 3, Int>::from_data(
                    TensorData::new(buckets, [batch, n, n]),
                    &device,
                )
                .into_primitive(),
            ),
            table: primitive(Tensor::<B, 2>::random(
                [5, heads],
                Distribution::Normal(0.0, 1.0),
                &device,
            )),
            column_offset: 0,
        }),
        dense: Some(random([batch, heads, n, n])),
        key_padding_mask: Some(
            Tensor::<B, 2, Bool>::from_data(TensorData::new(mask, [batch, n]), &device)
                .into_primitive(),
        ),
        scale: 0.5,
        block_size: 4,
    }
}

fn max_difference<const D: usize>(a: FloatTensor<B>, b: FloatTensor<B>) -> f32 {
    let (a, b) = (float::<B, D>(a), float::<B, D>(b));
    // fully masked rows have lse = -inf on both sides
    let same_inf = a.clone().equal(b.clone());
    (a - b).abs().mask_fill(same_inf, 0.0).max().into_scalar()
}

#[test]
fn batch_chunks_cover_the_batch_in_order() {
    let inputs = inputs(5, 2, 8);
    // one element's tile: 2 heads x 8 rows x 4 keys x 4 bytes = 256 bytes
    let ranges = |bytes| batch_chunks(&inputs, bytes);
    assert_eq!(ranges(1), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
    assert_eq!(ranges(512), vec![0..2, 2..4, 4..5]);
    assert_eq!(ranges(1 << 20), vec![0..5]);
}

#[test]
fn chunks_give_the_unchunked_result() {
    let (batch, heads, n) = (3, 2, 10);
    let inputs = inputs(batch, heads, n);
    // `batch_slice` of the whole batch copies the inputs (each run consumes its own)
    let chunked = forward_in_chunks(batch_slice(&inputs, 0..batch), 1);
    let unchunked = forward_in_chunks(batch_slice(&inputs, 0..batch), usize::MAX);
    assert_eq!(max_difference::<4>(chunked, unchunked.clone()), 0.0);

    let grad = primitive(Tensor::<B, 4>::random(
        [batch, heads, n, 5],
        Distribution::Normal(0.0, 1.0),
        &Default::default(),
    ));
    let a = backward_in_chunks(
        batch_slice(&inputs, 0..batch),
        unchunked.clone(),
        grad.clone(),
        1,
    );
    let b = backward_in_chunks(batch_slice(&inputs, 0..batch), unchunked, grad, usize::MAX);
    assert_eq!(max_difference::<4>(a.q, b.q), 0.0);
    assert_eq!(max_difference::<4>(a.k, b.k), 0.0);
    assert_eq!(max_difference::<4>(a.v, b.v), 0.0);
    assert_eq!(max_difference::<4>(a.dense.unwrap(), b.dense.unwrap()), 0.0);
    // the table gradient is summed per chunk: the same terms in another order
    let table = max_difference::<2>(a.table.unwrap(), b.table.unwrap());
    assert!(table <= 1e-5, "table gradient differs by {table}");
}
