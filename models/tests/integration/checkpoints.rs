//! Checkpoints written before the model's optional Graphormer parts (the graph token, the edge
//! encoding) still load: the parts come back absent and every other weight as saved.

use burn::backend::Flex;
use burn::module::Module;
use burn::nn::{LayerNorm, Linear};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::Backend;
use megagraph_models::encoders::{CentralityEncoding, InputEncoder, SpatialEncoding};
use megagraph_models::{GraphTransformer, GraphTransformerLayer};

use crate::common;
use common::{small_model, values};

type B = Flex;

/// The fields of a [`GraphTransformer`] before the graph token and the edge encoding: what older
/// checkpoints hold.
#[derive(Module, Debug)]
struct OlderGraphTransformer<B: Backend> {
    input: InputEncoder<B>,
    centrality: CentralityEncoding<B>,
    spatial: SpatialEncoding<B>,
    layers: Vec<GraphTransformerLayer<B>>,
    norm: LayerNorm<B>,
    classifier: Linear<B>,
    key_dropout: f64,
}

#[test]
fn checkpoints_without_the_token_and_the_edge_encoding_still_load() {
    let _turn = crate::turn();
    let device = Default::default();
    let model: GraphTransformer<B> = small_model(12, 8, 2, 2).init(&device);
    let older = OlderGraphTransformer {
        input: model.input,
        centrality: model.centrality,
        spatial: model.spatial,
        layers: model.layers,
        norm: model.norm,
        classifier: model.classifier,
        key_dropout: model.key_dropout,
    };
    let path = std::env::temp_dir().join(format!("megagraph-checkpoints-{}", std::process::id()));
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let (classifier, table) = (values(older.classifier.weight.val()), values(older.spatial.table.val()));
    older
        .save_file(path.clone(), &recorder)
        .unwrap_or_else(|e| panic!("{e}"));
    let loaded = small_model(12, 8, 2, 2)
        .init::<B>(&device)
        .load_file(path.clone(), &recorder, &device)
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(path.with_extension("mpk"));
    assert!(loaded.graph_token.is_none());
    assert!(loaded.edge_encoding.is_none());
    assert_eq!(values(loaded.classifier.weight.val()), classifier);
    assert_eq!(values(loaded.spatial.table.val()), table);
}
