use burn::config::Config;
use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Bool, Tensor, backend::Backend};
use megagraph_kernels::{AttentionError, BucketIndex, GraphAttentionBackend};

use crate::encoders::{
    CentralityEncoding, CentralityEncodingConfig, EdgeEncoding, EdgeEncodingConfig, GraphToken, GraphTokenConfig,
    InputEncoder, InputEncoderConfig, LabelEncoding, LabelEncodingConfig, SpatialEncoding, SpatialEncodingConfig,
};
use crate::{
    Attend, GraphBatch, GraphTransformerLayer, GraphTransformerLayerConfig, LocalAttention, key_mask, spatial_bias,
};

/// Configuration of a [`GraphTransformer`]. The defaults are sized for a 2-core CPU; the MegaGraph
/// paper's model is [`ModelPreset::Paper`](crate::ModelPreset::Paper).
#[derive(Config, Debug)]
pub struct GraphTransformerConfig {
    /// Width of the node features; `None` for graphs without features (learned node embeddings).
    pub feature_dim: Option<usize>,
    /// Number of nodes in the graph (sizes the node embeddings of featureless graphs).
    pub num_nodes: usize,
    /// Number of output classes.
    pub num_classes: usize,
    /// Number of transformer layers. Default: 2.
    #[config(default = 2)]
    pub num_layers: usize,
    /// Number of attention heads. Default: 4.
    #[config(default = 4)]
    pub num_heads: usize,
    /// Model width. Default: 64.
    #[config(default = 64)]
    pub hidden: usize,
    /// Hidden width of the feed-forward networks. Default: 64.
    #[config(default = 64)]
    pub ffn_hidden: usize,
    /// Dropout in the layers. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Dropout on the raw input features. Default: 0.5.
    #[config(default = 0.5)]
    pub input_dropout: f64,
    /// DropNode on the encoded inputs (see [`InputEncoderConfig::node_dropout`]). Default: 0.0.
    #[config(default = 0.0)]
    pub node_dropout: f64,
    /// Degree clamp of the centrality encoding. Default: 64.
    #[config(default = 64)]
    pub max_degree: usize,
    /// Largest exact shortest-path distance; farther pairs share one bucket. Default: 4.
    #[config(default = 4)]
    pub max_distance: u8,
    /// Initial decay of the spatial bias per hop (see [`SpatialEncodingConfig::initial_decay`]).
    /// Default: 2.0.
    #[config(default = 2.0)]
    pub spatial_initial_decay: f64,
    /// Key tile of the attention op. Default: 128.
    #[config(default = 128)]
    pub block_size: usize,
    /// Attention key dropout: while training, each layer hides each key node from all queries
    /// with this probability (a mask on keys, so it costs no `[seq, seq]` memory). Default: 0.0.
    #[config(default = 0.0)]
    pub key_dropout: f64,
    /// Graphormer's graph token ([`GraphToken`]): one learned position per sequence joined to
    /// every node, whose pairs read one more row of the spatial table (its virtual distance).
    /// Default: false.
    #[config(default = false)]
    pub graph_token: bool,
    /// Graphormer's edge encoding ([`EdgeEncoding`]) over edge features of this width: the mean
    /// over one shortest path (up to `max_distance` hops) of the edge features, projected per
    /// hop and head, added to every layer's logits. Batches then carry
    /// [`GraphBatch::edge_paths`]. Default: `None` (off).
    pub edge_encoding: Option<usize>,
    /// LayerScale of every layer (see [`GraphTransformerLayerConfig::layer_scale`]): the
    /// initial per-channel scale of each residual branch. Default: `None` (off).
    pub layer_scale: Option<f64>,
    /// UniMP's label input ([`LabelEncoding`]): a learned embedding of the class shown for each
    /// node ([`GraphBatch::label_input`]) added to its input representation. Default: false.
    #[config(default = false)]
    pub label_input: bool,
    /// Layer norm of the residual stream before the classifier. Without it (`false`) the
    /// logits scale with the weights, so that an L2 penalty of the weights (see
    /// [`GraphTransformer::layer_weight_squared_norm`]) bounds them, as in the unnormalized
    /// MLPs of GCN and GRAND; with it, scaling the weights before the norm changes nothing.
    /// Default: true.
    #[config(default = true)]
    pub final_norm: bool,
}

/// A Graphormer-style Graph Transformer for node classification.
#[derive(Module, Debug)]
pub struct GraphTransformer<B: Backend> {
    /// Node input encoder.
    pub input: InputEncoder<B>,
    /// Degree (centrality) encoding.
    pub centrality: CentralityEncoding<B>,
    /// Spatial bias table shared by all layers.
    pub spatial: SpatialEncoding<B>,
    /// Transformer layers.
    pub layers: Vec<GraphTransformerLayer<B>>,
    /// Final layer norm (applied when [`final_norm`](Self::final_norm) is set).
    pub norm: LayerNorm<B>,
    /// Whether [`head`](Self::head) normalizes before the classifier (see
    /// [`GraphTransformerConfig::final_norm`]).
    pub final_norm: bool,
    /// Node classifier.
    pub classifier: Linear<B>,
    /// Attention key dropout probability (see [`GraphTransformerConfig::key_dropout`]).
    pub key_dropout: f64,
    /// The graph token, if the model has one (see [`GraphTransformerConfig::graph_token`]).
    pub graph_token: Option<GraphToken<B>>,
    /// The edge encoding, if the model has one (see [`GraphTransformerConfig::edge_encoding`]).
    pub edge_encoding: Option<EdgeEncoding<B>>,
    /// The label input, if the model has one (see [`GraphTransformerConfig::label_input`]).
    pub label_input: Option<LabelEncoding<B>>,
}

impl GraphTransformerConfig {
    /// Number of distance buckets of the spatial encoding (`max_distance + 2`); the graph
    /// token's row, when there is one, follows them.
    pub fn num_buckets(&self) -> usize {
        self.max_distance as usize + 2
    }

    /// Initializes a [`GraphTransformer`] on `device`.
    ///
    /// # Panics
    ///
    /// If `hidden` is not a multiple of `num_heads`, or if `max_distance` is above 253 with a
    /// graph token (its row would not be a `u8` bucket).
    pub fn init<B: Backend>(&self, device: &B::Device) -> GraphTransformer<B> {
        let layer = GraphTransformerLayerConfig::new(self.hidden, self.num_heads, self.ffn_hidden)
            .with_dropout(self.dropout)
            .with_block_size(self.block_size)
            .with_layer_scale(self.layer_scale);
        GraphTransformer {
            input: InputEncoderConfig::new(self.hidden, self.num_nodes)
                .with_feature_dim(self.feature_dim)
                .with_dropout(self.input_dropout)
                .with_node_dropout(self.node_dropout)
                .init(device),
            centrality: CentralityEncodingConfig::new(self.hidden)
                .with_max_degree(self.max_degree)
                .init(device),
            spatial: SpatialEncodingConfig::new(self.num_buckets(), self.num_heads)
                .with_initial_decay(self.spatial_initial_decay)
                .with_graph_token(self.graph_token)
                .init(device),
            layers: (0..self.num_layers).map(|_| layer.init(device)).collect(),
            norm: LayerNormConfig::new(self.hidden).init(device),
            final_norm: self.final_norm,
            classifier: LinearConfig::new(self.hidden, self.num_classes).init(device),
            key_dropout: self.key_dropout,
            graph_token: self.graph_token.then(|| {
                let bucket = u8::try_from(self.num_buckets())
                    .unwrap_or_else(|_| panic!("max_distance {} leaves no u8 bucket for the graph token", self.max_distance));
                GraphTokenConfig::new(self.hidden, bucket).init(device)
            }),
            edge_encoding: self
                .edge_encoding
                .map(|edge_dim| EdgeEncodingConfig::new(edge_dim, self.num_heads, self.max_distance).init(device)),
            label_input: self
                .label_input
                .then(|| LabelEncodingConfig::new(self.hidden, self.num_classes).init(device)),
        }
    }
}

impl<B: GraphAttentionBackend> GraphTransformer<B> {
    /// Per-node logits of a batch: [`embed`](Self::embed), every layer, then [`head`](Self::head).
    ///
    /// - output: `[batch, seq, num_classes]`
    ///
    /// # Panics
    ///
    /// If the shapes of the batch disagree.
    pub fn forward(&self, batch: GraphBatch<B>) -> Tensor<B, 3> {
        let x = self.embed(&batch);
        let x = self.forward_layers(x, &batch, 0..self.layers.len());
        self.head(x)
    }

    /// Applies the layers in `layers` (a range of layer indices) to `x`, the output of
    /// [`embed`](Self::embed) or of earlier layers.
    ///
    /// # Panics
    ///
    /// If the shapes of `x` and the batch disagree.
    pub fn forward_layers(&self, x: Tensor<B, 3>, batch: &GraphBatch<B>, layers: std::ops::Range<usize>) -> Tensor<B, 3> {
        self.attend_layers(x, batch, layers, &LocalAttention)
            .unwrap_or_else(|err| panic!("graph attention on inconsistent shapes: {err}"))
    }
}

impl<B: Backend> GraphTransformer<B> {
    /// The embedding stage: input encoding plus centrality encoding, `[batch, seq, hidden]`,
    /// and the graph token in front when the model has one, `[batch, seq + 1, hidden]`.
    pub fn embed(&self, batch: &GraphBatch<B>) -> Tensor<B, 3> {
        self.with_graph_token(self.embed_nodes(batch))
    }

    /// The nodes' rows of the embedding stage (input encoding plus centrality encoding, plus
    /// the label encoding of [`GraphBatch::label_input`] when the model has one: "no label
    /// shown" everywhere when the batch shows none), `[batch, seq, hidden]`, without the graph
    /// token.
    pub fn embed_nodes(&self, batch: &GraphBatch<B>) -> Tensor<B, 3> {
        let x = self.input.forward(batch.input.clone())
            + self
                .centrality
                .forward(batch.in_degree.clone(), batch.out_degree.clone());
        match &self.label_input {
            Some(labels) => {
                x + match &batch.label_input {
                    Some(shown) => labels.forward(shown.clone()),
                    None => labels.unknown([batch.batch_size(), batch.seq_len()], &batch.device()),
                }
            }
            None => x,
        }
    }

    /// The graph token's row in front of the nodes' rows `[batch, seq, hidden]` when the model
    /// has one; the rows unchanged otherwise.
    fn with_graph_token(&self, nodes: Tensor<B, 3>) -> Tensor<B, 3> {
        match &self.graph_token {
            Some(token) => token.prepend(nodes),
            None => nodes,
        }
    }

    /// Final norm (unless [`final_norm`](Self::final_norm) is off) and classifier of the nodes:
    /// `[batch, seq, hidden]` (after the graph token, if any, which is dropped) →
    /// `[batch, seq, num_classes]`.
    pub fn head(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let x = match &self.graph_token {
            Some(token) => token.strip(x),
            None => x,
        };
        match self.final_norm {
            true => self.classifier.forward(self.norm.forward(x)),
            false => self.classifier.forward(x),
        }
    }

    /// The squared norm `Σ ‖W‖²` of the weight matrices of every layer's attention (query,
    /// key, value and output maps) and feed-forward network, `[1]`: what an L2 penalty of the
    /// layers reads. Biases, norms and LayerScale are not counted. `0` without layers.
    pub fn layer_weight_squared_norm(&self) -> Tensor<B, 1> {
        let device = self.classifier.weight.val().device();
        self.layers
            .iter()
            .flat_map(|layer| {
                let attention = &layer.attention;
                [&attention.query, &attention.key, &attention.value, &attention.output, &layer.ffn_in, &layer.ffn_out]
            })
            .map(|linear| linear.weight.val().powi_scalar(2).sum())
            .fold(Tensor::zeros([1], &device), |total, norm| total + norm)
    }

    /// The squared norm `‖W‖²` of the classifier's weight matrix, `[1]`: what an L2 penalty of
    /// the classifier reads.
    pub fn classifier_weight_squared_norm(&self) -> Tensor<B, 1> {
        self.classifier.weight.val().powi_scalar(2).sum()
    }

    /// Per-node logits of a batch, `[batch, seq, num_classes]`, with `attend` as every layer's
    /// attention core (e.g. [`SparseAttention`](crate::SparseAttention)); the embedding, the
    /// layers around the core, the key mask and the head are those of [`forward`](Self::forward).
    /// With a graph token the core sees `seq + 1` positions.
    ///
    /// # Errors
    ///
    /// `attend`'s (shapes that disagree with the batch); the graph token's distance index
    /// ([`GraphToken::index`]).
    pub fn forward_with<A>(&self, batch: GraphBatch<B>, attend: &A) -> Result<Tensor<B, 3>, A::Error>
    where
        A: Attend<B>,
        A::Error: From<AttentionError>,
    {
        self.forward_mixed_with(batch, attend, |nodes| nodes)
    }

    /// [`forward_with`](Self::forward_with) with `mix` applied to the nodes' embedding rows
    /// ([`embed_nodes`](Self::embed_nodes), `[batch, seq, hidden]`) before the graph token, if
    /// any, joins them and the layers run: a feature propagation over the batch's graph, say
    /// (GRAND's random propagation of the DropNode-masked rows). `mix` must keep the shape.
    ///
    /// # Errors
    ///
    /// As [`forward_with`](Self::forward_with).
    pub fn forward_mixed_with<A, F>(&self, batch: GraphBatch<B>, attend: &A, mix: F) -> Result<Tensor<B, 3>, A::Error>
    where
        A: Attend<B>,
        A::Error: From<AttentionError>,
        F: FnOnce(Tensor<B, 3>) -> Tensor<B, 3>,
    {
        let x = self.with_graph_token(mix(self.embed_nodes(&batch)));
        let x = self.attend_layers(x, &batch, 0..self.layers.len(), attend)?;
        Ok(self.head(x))
    }

    /// The layers `layers` over `x` with `attend` as their attention core. The distance index
    /// (widened by the graph token, if any) and the edge encoding's bias are built once for all
    /// of them; the key mask is drawn per layer ([`key_mask`]).
    fn attend_layers<A>(&self, mut x: Tensor<B, 3>, batch: &GraphBatch<B>, layers: std::ops::Range<usize>, attend: &A) -> Result<Tensor<B, 3>, A::Error>
    where
        A: Attend<B>,
        A::Error: From<AttentionError>,
    {
        let distance = self.attention_index(batch.distance.clone())?;
        let edges = self.edge_bias(batch)?;
        for (index, layer) in self.layers.iter().enumerate().take(layers.end).skip(layers.start) {
            let mut bias = spatial_bias(self.spatial.bias(distance.clone()), self.attention_keys(&batch.padding));
            bias.dense = edges.clone();
            x = layer.forward_with(x, bias, attend, index)?;
        }
        Ok(x)
    }

    /// The distance index the layers read: the batch's, widened by the graph token's row and
    /// column when the model has one.
    fn attention_index(&self, distance: BucketIndex<B>) -> Result<BucketIndex<B>, AttentionError> {
        match &self.graph_token {
            Some(token) => token.index(distance),
            None => Ok(distance),
        }
    }

    /// The edge encoding's dense bias of `batch`, `[batch, heads, seq, seq]` (widened by the
    /// graph token's zero row and column when the model has one), or `None` without an edge
    /// encoding.
    ///
    /// # Errors
    /// [`AttentionError::MissingInput`] if the model has an edge encoding and the batch no edge
    /// paths; as [`EdgeEncoding::forward`].
    pub fn edge_bias(&self, batch: &GraphBatch<B>) -> Result<Option<Tensor<B, 4>>, AttentionError> {
        let Some(encoding) = &self.edge_encoding else {
            return Ok(None);
        };
        let paths = batch.edge_paths.as_ref().ok_or(AttentionError::MissingInput {
            input: "edge_paths",
            reason: "the model has an edge encoding",
        })?;
        let bias = encoding.forward(paths)?;
        Ok(Some(match &self.graph_token {
            Some(token) => token.widen_bias(bias),
            None => bias,
        }))
    }

    /// One layer's key mask ([`key_mask`] of `padding`), with the graph token's key, never
    /// masked, in front when the model has one.
    fn attention_keys(&self, padding: &Tensor<B, 2, Bool>) -> Tensor<B, 2, Bool> {
        let keys = key_mask(padding, self.key_dropout);
        match &self.graph_token {
            Some(token) => token.key_mask(keys),
            None => keys,
        }
    }
}
