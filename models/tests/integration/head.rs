//! The head with and without its final layer norm, and the squared weight norms that the L2
//! penalties read, against plain float64 computations.

use burn::backend::Flex;
use burn::tensor::{Distribution, Tensor};

use crate::common;
use common::{assert_close, linear_f64, small_model, values};

type B = Flex;

const ROWS: usize = 10;
const D_MODEL: usize = 8;

/// `[1, ROWS, D_MODEL]` normal random values and their float64 copy.
fn random_rows() -> (Tensor<B, 3>, Vec<f64>) {
    let x = Tensor::<B, 3>::random([1, ROWS, D_MODEL], Distribution::Normal(0.0, 3.0), &Default::default());
    let copy = values(x.clone());
    (x, copy)
}

/// Float64 layer norm of each row (at initialization: unit scale, zero shift), epsilon 1e-5.
fn layer_norm_f64(x: &[f64]) -> Vec<f64> {
    x.chunks(D_MODEL)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / D_MODEL as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / D_MODEL as f64;
            row.iter().map(move |v| (v - mean) / (var + 1e-5).sqrt())
        })
        .collect()
}

#[test]
fn the_head_normalizes_before_the_classifier_unless_the_final_norm_is_off() {
    let _turn = crate::turn();
    let device = Default::default();
    let (x, x64) = random_rows();
    let normalized = small_model(ROWS, D_MODEL, 2, 2).init::<B>(&device);
    assert!(normalized.final_norm, "the final norm is on by default");
    let want = linear_f64(&layer_norm_f64(&x64), &normalized.classifier);
    assert_close(&values(normalized.head(x.clone())), &want, 1e-4, "head with the final norm");

    let plain = small_model(ROWS, D_MODEL, 2, 2).with_final_norm(false).init::<B>(&device);
    let want = linear_f64(&x64, &plain.classifier);
    assert_close(&values(plain.head(x.clone())), &want, 1e-4, "head without the final norm");
    // without the norm the logits scale with the stream (less the bias); with it they do not
    let bias = values(plain.classifier.bias.as_ref().expect("a bias").val());
    let centred = |logits: Vec<f64>| -> Vec<f64> {
        logits.chunks(bias.len()).flat_map(|row| row.iter().zip(&bias).map(|(l, b)| l - b)).collect()
    };
    let once = centred(values(plain.head(x.clone())));
    let doubled: Vec<f64> = centred(values(plain.head(x.clone() * 2.0))).iter().map(|v| v / 2.0).collect();
    assert_close(&doubled, &once, 1e-4, "logits of the doubled stream, halved");
    assert_close(
        &values(normalized.head(x.clone() * 2.0)),
        &values(normalized.head(x)),
        1e-4,
        "normalized logits of the doubled stream",
    );
}

#[test]
fn the_squared_weight_norms_are_the_float64_sums_of_squares() {
    let _turn = crate::turn();
    let device = Default::default();
    let squares = |w: Vec<f64>| w.iter().map(|v| v * v).sum::<f64>();
    for layers in [0, 1, 3] {
        let model = small_model(ROWS, D_MODEL, 2, 2).with_num_layers(layers).init::<B>(&device);
        let want: f64 = model
            .layers
            .iter()
            .flat_map(|layer| {
                let a = &layer.attention;
                [&a.query, &a.key, &a.value, &a.output, &layer.ffn_in, &layer.ffn_out]
            })
            .map(|linear| squares(values(linear.weight.val())))
            .sum();
        let got = values(model.layer_weight_squared_norm());
        assert_close(&got, &[want], 1e-5, &format!("layer weights, {layers} layers"));
        let want = squares(values(model.classifier.weight.val()));
        assert_close(&values(model.classifier_weight_squared_norm()), &[want], 1e-5, "classifier weights");
    }
}
