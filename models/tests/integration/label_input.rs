//! UniMP's label input against a plain float64 computation: the embedding stage adds the shown
//! class's row of the label table (the "no label shown" row elsewhere, and everywhere when the
//! batch shows none), and the gradient of the table reaches exactly the rows that were read.

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use megagraph_models::{GraphBatch, GraphTransformer, NodeInput};

use crate::common;
use common::{assert_close, small_model, values};

type B = Flex;
type AB = Autodiff<Flex>;

const BATCH: usize = 2;
const SEQ: usize = 5;
const D_MODEL: usize = 8;
const CLASSES: usize = 3;

/// A batch of random features, degrees 1, every pair "farther", no padding, showing `shown`.
fn batch<BK: burn::tensor::backend::Backend>(features: &[f32], shown: Option<&[i64]>) -> GraphBatch<BK> {
    let device = Default::default();
    GraphBatch {
        input: NodeInput::Features(Tensor::from_data(TensorData::new(features.to_vec(), [BATCH, SEQ, D_MODEL]), &device)),
        in_degree: Tensor::<BK, 2, Int>::ones([BATCH, SEQ], &device),
        out_degree: Tensor::<BK, 2, Int>::ones([BATCH, SEQ], &device),
        distance: Tensor::<BK, 3, Int>::full([BATCH, SEQ, SEQ], 3, &device).into(),
        padding: Tensor::<BK, 2, Int>::zeros([BATCH, SEQ], &device).equal_elem(1),
        edge_paths: None,
        label_input: shown.map(|shown| Tensor::from_data(TensorData::new(shown.to_vec(), [BATCH, SEQ]), &device)),
    }
}

fn features() -> Vec<f32> {
    Tensor::<B, 1>::random([BATCH * SEQ * D_MODEL], Distribution::Normal(0.0, 1.0), &Default::default())
        .into_data()
        .iter::<f32>()
        .collect()
}

/// A random class or "none shown" (`CLASSES`, or an out-of-range value) per position.
fn shown() -> Vec<i64> {
    let draws = Tensor::<B, 1>::random([BATCH * SEQ], Distribution::Uniform(0.0, 5.0), &Default::default());
    let mut shown: Vec<i64> = draws.into_data().iter::<f32>().map(|x| x as i64).collect();
    // every class, the "none" row and an out-of-range index at least once
    shown[..5].copy_from_slice(&[0, 1, 2, CLASSES as i64, -1]);
    shown
}

#[test]
fn the_embedding_stage_adds_the_shown_rows_of_the_label_table() {
    let _turn = crate::turn();
    let device = Default::default();
    let model: GraphTransformer<B> = small_model(BATCH * SEQ, D_MODEL, 2, 2).with_label_input(true).init(&device);
    let (features, shown) = (features(), shown());
    // read the model once before cloning it: a clone of a lazily initialized parameter would
    // draw its own values
    let with = values(model.embed_nodes(&batch(&features, Some(&shown))));
    let plain = GraphTransformer { label_input: None, ..model.clone() };
    let without = values(plain.embed_nodes(&batch(&features, None)));
    let table = values(model.label_input.as_ref().unwrap_or_else(|| panic!("no label input")).embedding.weight.val());
    let expected = |shown: &[i64]| -> Vec<f64> {
        let mut out = without.clone();
        for (slot, &class) in shown.iter().enumerate() {
            let row = if (0..CLASSES as i64).contains(&class) { class as usize } else { CLASSES };
            for c in 0..D_MODEL {
                out[slot * D_MODEL + c] += table[row * D_MODEL + c];
            }
        }
        out
    };
    assert_close(&with, &expected(&shown), 1e-6, "embedding with shown labels");
    // a batch that shows none reads the "none shown" row everywhere
    let none = values(model.embed_nodes(&batch(&features, None)));
    assert_close(&none, &expected(&[CLASSES as i64; BATCH * SEQ]), 1e-6, "embedding without shown labels");
}

#[test]
fn the_gradient_of_the_label_table_reaches_the_rows_read() {
    let _turn = crate::turn();
    let device = Default::default();
    let model: GraphTransformer<AB> = small_model(BATCH * SEQ, D_MODEL, 2, 2).with_label_input(true).init(&device);
    let mut shown = vec![CLASSES as i64; BATCH * SEQ];
    // class 1 twice, class 0 once, class 2 never
    shown[0] = 1;
    shown[3] = 1;
    shown[7] = 0;
    let weights: Vec<f32> = (0..BATCH * SEQ * D_MODEL).map(|i| (i % 7) as f32 - 3.0).collect();
    let weighting = Tensor::<AB, 3>::from_data(TensorData::new(weights.clone(), [BATCH, SEQ, D_MODEL]), &device);
    let loss = (model.embed_nodes(&batch(&features(), Some(&shown))) * weighting).sum();
    let grads = loss.backward();
    let table = &model.label_input.as_ref().unwrap_or_else(|| panic!("no label input")).embedding.weight;
    let gradient = values(table.grad(&grads).unwrap_or_else(|| panic!("no gradient of the label table")));
    // d loss / d row r = the sum of the weighting over the positions that read row r
    let mut expected = vec![0.0f64; (CLASSES + 1) * D_MODEL];
    for (slot, &class) in shown.iter().enumerate() {
        for c in 0..D_MODEL {
            expected[class as usize * D_MODEL + c] += f64::from(weights[slot * D_MODEL + c]);
        }
    }
    assert_close(&gradient, &expected, 1e-6, "label table gradient");
    assert!(gradient[2 * D_MODEL..3 * D_MODEL].iter().all(|&g| g == 0.0), "a class never shown got a gradient");
}
