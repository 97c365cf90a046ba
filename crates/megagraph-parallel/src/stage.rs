//! [`StageModule`]: the part of a [`GraphTransformer`] one pipeline stage holds, and its forward
//! pass over a context block.

use std::sync::Arc;

use burn::module::{Module, ModuleMapper, Param};
use burn::nn::{LayerNorm, Linear};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Int, Tensor};
use megagraph_kernels::{AttentionError, BucketIndex, DistanceBias};
use megagraph_models::encoders::{CentralityEncoding, EdgeEncoding, EdgePaths, InputEncoder, SpatialEncoding};
use megagraph_models::{
    Attend, AttendInputs, GraphTransformer, GraphTransformerLayer, LocalAttention, NodeInput, key_mask, spatial_bias,
};

use crate::context::{ContextParallelBackend, RingCall, RingEndpoint, ring_attention};
use crate::ulysses::{UlyssesEndpoint, gather_key_mask, ulysses_attention};
use crate::{ParallelConfig, ParallelError};

/// The parameters of one pipeline stage: stage 0 holds the embedding stage (input encoder,
/// centrality encoding, the spatial bias table and the edge encoding, if any), every stage a
/// contiguous run of layers, the last stage the final norm and the classifier.
#[derive(Module, Debug)]
pub struct StageModule<B: Backend> {
    /// Input encoder (stage 0).
    pub input: Option<InputEncoder<B>>,
    /// Centrality encoding (stage 0).
    pub centrality: Option<CentralityEncoding<B>>,
    /// Spatial bias table (stage 0). Later stages get its value with the activations.
    pub spatial: Option<SpatialEncoding<B>>,
    /// Edge encoding (stage 0, when the model has one). Stage 0 computes its dense bias once per
    /// micro-batch; later stages get the bias with the activations.
    pub edge_encoding: Option<EdgeEncoding<B>>,
    /// This stage's layers.
    pub layers: Vec<GraphTransformerLayer<B>>,
    /// Final layer norm (last stage).
    pub norm: Option<LayerNorm<B>>,
    /// Classifier (last stage).
    pub classifier: Option<Linear<B>>,
    /// Global index of the first layer.
    pub first_layer: usize,
    /// Attention key dropout probability of the model (see
    /// [`GraphTransformerConfig::key_dropout`](megagraph_models::GraphTransformerConfig)).
    pub key_dropout: f64,
}

impl<B: Backend> StageModule<B> {
    /// Splits `model` into the stages of `config` (`config.stage_layers`), in stage order.
    ///
    /// # Errors
    ///
    /// [`ParallelError::Config`] when `stage_layers` does not match the model's layers;
    /// [`ParallelError::Model`] when the model has a graph token (it runs on one device only). An
    /// edge encoding runs on every mesh: with context parallelism each rank computes its block's
    /// rows of the bias (the Ulysses core refuses it, see [`ulysses_attention`]); the mode is not
    /// known here.
    pub fn split(
        model: GraphTransformer<B>,
        config: &ParallelConfig,
    ) -> Result<Vec<Self>, ParallelError> {
        let layers = model.layers.len();
        if config.stage_layers.len() != config.pp {
            return Err(crate::ParallelConfigError::StageCountMismatch {
                entries: config.stage_layers.len(),
                pp: config.pp,
            }
            .into());
        }
        let sum: usize = config.stage_layers.iter().sum();
        if sum != layers {
            return Err(crate::ParallelConfigError::LayerSumMismatch { sum, layers }.into());
        }
        if model.graph_token.is_some() {
            return Err(ParallelError::Model {
                field: "graph_token",
                value: 1,
                reason: "the graph token runs on one device only (mesh 1 x 1 x 1)",
            });
        }
        if model.label_input.is_some() {
            return Err(ParallelError::Model {
                field: "label_input",
                value: 1,
                reason: "the label input runs on one device only (mesh 1 x 1 x 1)",
            });
        }
        if !model.final_norm {
            return Err(ParallelError::Model {
                field: "final_norm",
                value: 0,
                reason: "a head without the final norm runs on one device only (mesh 1 x 1 x 1)",
            });
        }
        let GraphTransformer {
            input,
            centrality,
            spatial,
            layers,
            norm,
            final_norm: _,
            classifier,
            key_dropout,
            graph_token: _,
            edge_encoding,
            label_input: _,
        } = model;
        let mut layers = layers.into_iter();
        let mut input = Some(input);
        let mut centrality = Some(centrality);
        let mut spatial = Some(spatial);
        let mut edge_encoding = edge_encoding;
        let mut norm = Some(norm);
        let mut classifier = Some(classifier);
        let mut first_layer = 0;
        let mut stages = Vec::with_capacity(config.pp);
        for (stage, &count) in config.stage_layers.iter().enumerate() {
            let last = stage + 1 == config.pp;
            stages.push(StageModule {
                input: input.take(),
                centrality: centrality.take(),
                spatial: spatial.take(),
                edge_encoding: edge_encoding.take(),
                layers: layers.by_ref().take(count).collect(),
                norm: if last { norm.take() } else { None },
                classifier: if last { classifier.take() } else { None },
                first_layer,
                key_dropout,
            });
            first_layer += count;
        }
        Ok(stages)
    }

    /// Puts stages (in stage order, as [`split`](Self::split) made them) back together.
    ///
    /// Returns `None` when a part is missing (no stage with the embedding stage or the head).
    pub fn assemble(stages: Vec<Self>) -> Option<GraphTransformer<B>> {
        let mut input = None;
        let mut centrality = None;
        let mut spatial = None;
        let mut edge_encoding = None;
        let mut norm = None;
        let mut classifier = None;
        let mut layers = Vec::new();
        let key_dropout = stages.first().map_or(0.0, |stage| stage.key_dropout);
        for stage in stages {
            input = input.or(stage.input);
            centrality = centrality.or(stage.centrality);
            spatial = spatial.or(stage.spatial);
            edge_encoding = edge_encoding.or(stage.edge_encoding);
            norm = norm.or(stage.norm);
            classifier = classifier.or(stage.classifier);
            layers.extend(stage.layers);
        }
        Some(GraphTransformer {
            input: input?,
            centrality: centrality?,
            spatial: spatial?,
            layers,
            norm: norm?,
            final_norm: true,
            classifier: classifier?,
            key_dropout,
            graph_token: None,
            edge_encoding,
            label_input: None,
        })
    }
}

/// `module` with every float parameter marked as requiring a gradient: the trainer trains all
/// parameters. (Burn drops the flag when an inner-backend module is cloned or moved to a
/// device, so a module built with `from_inner` cannot be trusted to carry it.)
pub fn trainable<B: AutodiffBackend, M: Module<B>>(module: M) -> M {
    struct RequireGrad;
    impl<B: AutodiffBackend> ModuleMapper<B> for RequireGrad {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.set_require_grad(true)
        }
    }
    module.map(&mut RequireGrad)
}

/// `module` with every trainable float parameter replaced by a fresh leaf of the same value and
/// [`ParamId`](burn::module::ParamId) (no data is copied): the autodiff graph of one micro-batch
/// then shares no node with another's.
///
/// Burn 0.21's autodiff merges the graphs of tensors that share a node into one, and its
/// clean-up after a backward pass may then drop steps of another graph still in flight: with
/// two micro-batches in flight on one stage (1F1B), a gradient was sometimes lost. A stage runs
/// each micro-batch on its own copy, and reads the gradients from that copy.
pub fn fresh_leaves<B: AutodiffBackend, M: Module<B>>(module: M) -> M {
    struct FreshLeaves;
    impl<B: AutodiffBackend> ModuleMapper<B> for FreshLeaves {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let leaf = if tensor.is_require_grad() {
                tensor.detach().require_grad()
            } else {
                tensor
            };
            Param::from_mapped_value(id, leaf, mapper)
        }
    }
    module.map(&mut FreshLeaves)
}

/// Per-micro-batch context of a stage's forward pass.
pub(crate) struct BlockContext<'a, B: ContextParallelBackend> {
    /// Distance index rows of the block over `[batch, block, padded_seq]`.
    pub index_rows: BucketIndex<B>,
    /// Key padding mask of the block, `[batch, block]`.
    pub padding: Tensor<B, 2, Bool>,
    /// The spatial table `[buckets, heads]` (stage 0's parameter, or the value received with the
    /// activations).
    pub table: Tensor<B, 2>,
    /// The edge encoding's dense bias, the block's rows over every column `[batch, heads, block,
    /// padded_seq]` (stage 0 computes it, later stages receive it with the activations); `None`
    /// without an edge encoding.
    pub dense: Option<Tensor<B, 4>>,
    /// The context ring of this rank.
    pub ring: &'a Arc<RingEndpoint<B::InnerBackend>>,
    /// Step and micro-batch (the layer is filled in per layer).
    pub call: RingCall,
    /// With Ulysses (`cp_mode = ulysses`): what its core reads; `None`: the ring.
    pub ulysses: Option<UlyssesContext<'a, B>>,
}

/// What the Ulysses core of a block reads besides the block's own rows.
pub(crate) struct UlyssesContext<'a, B: ContextParallelBackend> {
    /// Distance index of every row of the (padded) sequence, `[batch, padded_seq, padded_seq]`.
    pub index: BucketIndex<B>,
    /// This rank's endpoint of the context group's all-to-alls.
    pub group: &'a Arc<UlyssesEndpoint<B::InnerBackend>>,
}

impl<B: ContextParallelBackend> StageModule<B> {
    /// The embedding stage on a block: input plus centrality encoding, `[batch, block, hidden]`
    /// (same computation as [`GraphTransformer::embed`]). `None` on stages other than 0.
    pub(crate) fn embed(
        &self,
        input: NodeInput<B>,
        in_degree: Tensor<B, 2, Int>,
        out_degree: Tensor<B, 2, Int>,
    ) -> Option<Tensor<B, 3>> {
        let encoded = self.input.as_ref()?.forward(input);
        Some(encoded + self.centrality.as_ref()?.forward(in_degree, out_degree))
    }

    /// The edge encoding's dense bias of a block's rows, `[batch, heads, block, padded_seq]`
    /// (`block = padded_seq` with `cp = 1`; the rows of [`GraphTransformer::edge_bias`]) from
    /// the block's edge paths: computed once per micro-batch on stage 0 and sent with the
    /// activations. `Ok(None)` when the stage holds no edge encoding.
    ///
    /// # Errors
    /// [`AttentionError::MissingInput`] when the stage has an edge encoding and the block no edge
    /// paths; as [`EdgeEncoding::forward`].
    pub(crate) fn edge_bias(&self, paths: Option<&EdgePaths<B>>) -> Result<Option<Tensor<B, 4>>, AttentionError> {
        let Some(encoding) = &self.edge_encoding else {
            return Ok(None);
        };
        let paths = paths.ok_or(AttentionError::MissingInput {
            input: "edge_paths",
            reason: "the stage has an edge encoding",
        })?;
        encoding.forward(paths).map(Some)
    }

    /// This stage's layers on a block (the model's own layers), with ring attention over the
    /// context group as their attention core.
    pub(crate) fn forward_layers(
        &self,
        mut x: Tensor<B, 3>,
        context: &BlockContext<'_, B>,
    ) -> Result<Tensor<B, 3>, ParallelError> {
        for (offset, layer) in self.layers.iter().enumerate() {
            // each rank draws the key dropout of its own keys, which travel the ring with them
            // (Ulysses gathers every block's mask)
            let keys = key_mask(&context.padding, self.key_dropout);
            let global = self.first_layer + offset;
            let (index, keys) = match &context.ulysses {
                None => (context.index_rows.clone(), keys),
                Some(ulysses) => (ulysses.index.clone(), gather_key_mask(keys, ulysses.group, RingCall { layer: global, ..context.call })?),
            };
            let distance = DistanceBias {
                index,
                table: context.table.clone(),
                column_offset: 0,
            };
            let mut bias = spatial_bias(distance, keys);
            bias.dense = context.dense.clone();
            x = layer.forward_with(x, bias, context, global)?;
        }
        Ok(x)
    }

    /// Final norm and classifier, `[batch, block, classes]`; `None` except on the last stage.
    pub(crate) fn head(&self, x: Tensor<B, 3>) -> Option<Tensor<B, 3>> {
        Some(
            self.classifier
                .as_ref()?
                .forward(self.norm.as_ref()?.forward(x)),
        )
    }
}

/// The ring over the context group as the attention core of the model's layers: each layer's
/// queries of this block attend over the keys of every block of the sequence, which travel the
/// ring ([`ring_attention`]); the layer around it is the model's own. A dense bias (the edge
/// encoding's, this block's rows) does not travel the ring: each hop reads the columns of the
/// key block it holds. With one ring position (`cp = 1`) every key is at hand and a layer with
/// a dense bias runs the one-device op ([`LocalAttention`]).
impl<B: ContextParallelBackend> Attend<B> for BlockContext<'_, B> {
    type Error = ParallelError;

    fn attend(&self, inputs: AttendInputs<B>, layer: usize) -> Result<Tensor<B, 4>, ParallelError> {
        let call = RingCall { layer, ..self.call };
        if self.ring.size == 1 && inputs.bias.dense.is_some() {
            let rank = self.ring.rank;
            return LocalAttention
                .attend(inputs, layer)
                .map_err(|source| ParallelError::Attention { rank, source });
        }
        match &self.ulysses {
            None => Ok(ring_attention(inputs, self.ring, call)?.output),
            Some(ulysses) => ulysses_attention(inputs, ulysses.group, call),
        }
    }
}
