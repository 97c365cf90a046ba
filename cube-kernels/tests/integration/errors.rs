//! Invalid inputs return typed errors instead of panicking.

use burn::backend::Flex;
use burn::tensor::{Int, Tensor};
use megagraph_kernels::{
    AttentionBias, AttentionError, AttentionOptions, DistanceBias, graph_attention,
};

type B = Flex;

fn qkv(q: [usize; 4], kv: [usize; 4]) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
    let device = Default::default();
    (
        Tensor::ones(q, &device),
        Tensor::ones(kv, &device),
        Tensor::ones(kv, &device),
    )
}

fn distance(index: [usize; 3], table: [usize; 2], column_offset: usize) -> DistanceBias<B> {
    let device = Default::default();
    DistanceBias {
        index: Tensor::<B, 3, Int>::zeros(index, &device).into(),
        table: Tensor::zeros(table, &device),
        column_offset,
    }
}

fn run(q: [usize; 4], kv: [usize; 4], bias: AttentionBias<B>) -> Result<(), AttentionError> {
    let (q, k, v) = qkv(q, kv);
    graph_attention(q, k, v, bias, &AttentionOptions::default()).map(|_| ())
}

#[test]
fn key_heads_mismatch() {
    let _turn = crate::turn();
    let err = run([2, 4, 5, 8], [2, 3, 7, 8], AttentionBias::default());
    assert_eq!(
        err,
        Err(AttentionError::ShapeMismatch {
            tensor: "k",
            dim: "heads",
            expected: 4,
            actual: 3,
            shape: vec![2, 3, 7, 8],
        })
    );
    let message = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("`k`") && message.contains("heads"),
        "{message}"
    );
}

#[test]
fn column_offset_past_the_index() {
    let _turn = crate::turn();
    let bias = AttentionBias {
        distance: Some(distance([2, 5, 10], [4, 3], 4)),
        ..Default::default()
    };
    let err = run([2, 3, 5, 8], [2, 3, 7, 8], bias);
    assert_eq!(
        err,
        Err(AttentionError::ColumnOffsetOutOfRange {
            column_offset: 4,
            k_len: 7,
            total_k_len: 10
        })
    );
    // the same block fits at offset 3
    let bias = AttentionBias {
        distance: Some(distance([2, 5, 10], [4, 3], 3)),
        ..Default::default()
    };
    assert_eq!(run([2, 3, 5, 8], [2, 3, 7, 8], bias), Ok(()));
}

#[test]
fn index_and_table_shape_mismatches() {
    let _turn = crate::turn();
    let bias = AttentionBias {
        distance: Some(distance([2, 6, 10], [4, 3], 0)),
        ..Default::default()
    };
    assert!(matches!(
        run([2, 3, 5, 8], [2, 3, 7, 8], bias),
        Err(AttentionError::ShapeMismatch {
            tensor: "bias.distance.index",
            dim: "q_len",
            expected: 5,
            actual: 6,
            ..
        })
    ));
    let bias = AttentionBias {
        distance: Some(distance([2, 5, 10], [4, 2], 0)),
        ..Default::default()
    };
    assert!(matches!(
        run([2, 3, 5, 8], [2, 3, 7, 8], bias),
        Err(AttentionError::ShapeMismatch {
            tensor: "bias.distance.table",
            dim: "heads",
            expected: 3,
            actual: 2,
            ..
        })
    ));
}

#[test]
fn dense_bias_shape_mismatch() {
    let _turn = crate::turn();
    let device = Default::default();
    let bias = AttentionBias {
        dense: Some(Tensor::zeros([2, 3, 5, 6], &device)),
        ..Default::default()
    };
    assert!(matches!(
        run([2, 3, 5, 8], [2, 3, 7, 8], bias),
        Err(AttentionError::ShapeMismatch {
            tensor: "bias.dense",
            dim: "k_len",
            expected: 7,
            actual: 6,
            ..
        })
    ));
}

#[test]
fn empty_key_block_is_rejected() {
    let _turn = crate::turn();
    assert!(matches!(
        run([1, 1, 2, 4], [1, 1, 0, 4], AttentionBias::default()),
        Err(AttentionError::EmptyDimension {
            tensor: "k",
            dim: "k_len",
            ..
        })
    ));
}

#[test]
fn bucket_range_check_reports_out_of_range_values() {
    let _turn = crate::turn();
    let device = Default::default();
    let index = DistanceBias::<B>::index_from_u8(vec![0, 1, 2, 9], [1, 2, 2], &device)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut bias = DistanceBias {
        index: index.into(),
        table: Tensor::zeros([5, 2], &device),
        column_offset: 0,
    };
    assert_eq!(
        bias.check_bucket_range(),
        Err(AttentionError::BucketOutOfRange {
            value: 9,
            buckets: 5
        })
    );
    bias.table = Tensor::zeros([10, 2], &device);
    assert_eq!(bias.check_bucket_range(), Ok(()));
}
