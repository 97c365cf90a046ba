//! A whole temporal link-prediction model: memory updater, embedding and edge predictor.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Int, Tensor, backend::Backend};

use super::{
    DysatEmbedding, DysatEmbeddingConfig, EdgePredictor, EdgePredictorConfig,
    GruMemoryUpdaterConfig, IdentityEmbedding, IdentityEmbeddingConfig, JodieTimeEmbedding,
    JodieTimeEmbeddingConfig, MemoryCellConfig, MemoryUpdateKind, MemoryUpdater, MemoryWrite,
    NodeRows, RnnMemoryUpdaterConfig, SnapshotAttentionConfig, StructuralAttentionConfig,
    TemporalAttentionEmbedding, TemporalAttentionEmbeddingConfig, TemporalAttentionLayerConfig,
    TemporalBatch, TemporalNeighbourhood, TransformerMemoryUpdaterConfig,
};

/// How a model turns node representations into embeddings (TGL's `gnn.arch`, plus JODIE's time
/// transform and DySAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingKind {
    /// The (layer-normalized) representation itself: APAN.
    Identity,
    /// The identity followed by JODIE's time projection: JODIE.
    Jodie,
    /// Temporal graph attention over `layers` hops: TGN, TGAT.
    Attention,
    /// Structural attention per snapshot and temporal self-attention: DySAT.
    Dysat,
}

/// Configuration of a [`TemporalModel`]; the presets ([`tgn`](Self::tgn), …) set TGL's values.
#[derive(Config, Debug)]
pub struct TemporalModelConfig {
    /// The memory updater; `None` (the default) for a memoryless model.
    pub memory_update: Option<MemoryUpdateKind>,
    /// The embedding.
    pub embedding: EmbeddingKind,
    /// Width of the node features; 0 for none. Default: 0.
    #[config(default = 0)]
    pub dim_node: usize,
    /// Width of the edge features; 0 for none. Default: 0.
    #[config(default = 0)]
    pub dim_edge: usize,
    /// Memory width; also the width of the zero representations of a memoryless model without
    /// node features. Default: 100.
    #[config(default = 100)]
    pub dim_memory: usize,
    /// Width of the time encodings. Default: 100.
    #[config(default = 100)]
    pub dim_time: usize,
    /// Embedding width of the attention and DySAT embeddings. Default: 100.
    #[config(default = 100)]
    pub dim_out: usize,
    /// Mails kept per node: 1 for the cell updaters, 10 for APAN. Default: 1.
    #[config(default = 1)]
    pub mailbox_size: usize,
    /// Attention heads. Default: 2.
    #[config(default = 2)]
    pub att_head: usize,
    /// Hops of temporal graph attention (TGL's `layer`). Default: 1.
    #[config(default = 1)]
    pub layers: usize,
    /// Snapshots DySAT reads. Default: 3.
    #[config(default = 3)]
    pub snapshots: usize,
    /// Dropout. Default: 0.1.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Number of nodes given a learned input vector of width `dim_node`, for data without node
    /// features (DySAT reads nothing else); 0 for none. The trainer reads the vectors with
    /// [`TemporalModel::node_features`] and passes them as the batch's features. Default: 0.
    #[config(default = 0)]
    pub embedded_nodes: usize,
}

impl TemporalModelConfig {
    /// Width of the node representations the embedding reads: the memory width with memory,
    /// else the node feature width, else `dim_memory` (zeros).
    pub fn dim_hidden(&self) -> usize {
        if self.memory_update.is_none() && self.dim_node > 0 {
            self.dim_node
        } else {
            self.dim_memory
        }
    }

    /// Width of a mail: `[mem_self || mem_other || edge_feat]`.
    pub fn dim_mail(&self) -> usize {
        2 * self.dim_memory + self.dim_edge
    }

    /// Width of the embeddings the edge predictor reads.
    pub fn dim_embedding(&self) -> usize {
        match self.embedding {
            EmbeddingKind::Identity | EmbeddingKind::Jodie => self.dim_hidden(),
            EmbeddingKind::Attention | EmbeddingKind::Dysat => self.dim_out,
        }
    }

    /// Initializes a [`TemporalModel`] on `device`.
    ///
    /// # Panics
    ///
    /// If the configuration is inconsistent: a cell updater (GRU, RNN) with `mailbox_size ≠ 1`,
    /// JODIE's embedding without memory, learned node inputs of width `dim_node = 0`, or widths
    /// that are not multiples of `att_head`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> TemporalModel<B> {
        let (dim_mail, dim_hidden) = (self.dim_mail(), self.dim_hidden());
        let cell = matches!(
            self.memory_update,
            Some(MemoryUpdateKind::Gru | MemoryUpdateKind::Rnn)
        );
        assert!(
            !cell || self.mailbox_size == 1,
            "a GRU or RNN updater reads one mail (mailbox_size {})",
            self.mailbox_size
        );
        assert!(
            self.embedding != EmbeddingKind::Jodie || self.memory_update.is_some(),
            "JODIE's time projection needs a memory"
        );
        assert!(
            self.embedded_nodes == 0 || self.dim_node > 0,
            "learned node inputs need a width (dim_node = 0)"
        );
        let node_embedding = (self.embedded_nodes > 0)
            .then(|| EmbeddingConfig::new(self.embedded_nodes, self.dim_node).init(device));
        let cell = MemoryCellConfig::new(dim_mail, self.dim_memory).with_dim_time(self.dim_time);
        let updater = self.memory_update.map(|kind| match kind {
            MemoryUpdateKind::Gru => {
                MemoryUpdater::Gru(GruMemoryUpdaterConfig::new(cell.clone()).init(device))
            }
            MemoryUpdateKind::Rnn => {
                MemoryUpdater::Rnn(RnnMemoryUpdaterConfig::new(cell.clone()).init(device))
            }
            MemoryUpdateKind::Transformer => MemoryUpdater::Transformer(
                TransformerMemoryUpdaterConfig::new(dim_mail, self.dim_memory)
                    .with_dim_time(self.dim_time)
                    .with_att_head(self.att_head)
                    .with_dropout(self.dropout)
                    .init(device),
            ),
        });
        let node_feat_map = (self.memory_update.is_some() && self.dim_node > 0)
            .then(|| LinearConfig::new(self.dim_node, self.dim_memory).init(device));
        let identity = matches!(
            self.embedding,
            EmbeddingKind::Identity | EmbeddingKind::Jodie
        )
        .then(|| IdentityEmbeddingConfig::new(dim_hidden).init(device));
        let jodie = (self.embedding == EmbeddingKind::Jodie)
            .then(|| JodieTimeEmbeddingConfig::new(dim_hidden).init(device));
        let attention = (self.embedding == EmbeddingKind::Attention).then(|| {
            let layer = TemporalAttentionLayerConfig::new(dim_hidden, self.dim_edge)
                .with_dim_time(self.dim_time)
                .with_dim_out(self.dim_out)
                .with_att_head(self.att_head)
                .with_dropout(self.dropout);
            TemporalAttentionEmbeddingConfig::new(layer)
                .with_layers(self.layers)
                .init(device)
        });
        let dysat = (self.embedding == EmbeddingKind::Dysat).then(|| {
            let structural = StructuralAttentionConfig::new(
                dim_hidden,
                self.dim_out,
                self.att_head,
                self.dropout,
            );
            let temporal = SnapshotAttentionConfig::new(self.dim_out)
                .with_snapshots(self.snapshots)
                .with_att_head(self.att_head)
                .with_dropout(self.dropout);
            DysatEmbeddingConfig::new(structural, temporal).init(device)
        });
        TemporalModel {
            node_embedding,
            updater,
            node_feat_map,
            identity,
            jodie,
            attention,
            dysat,
            predictor: EdgePredictorConfig::new(self.dim_embedding()).init(device),
            dim_hidden,
        }
    }
}

/// A temporal link-prediction model (TGL's `GeneralModel`): memory rows pass through the
/// [`MemoryUpdater`], node features join them through `node_feat_map`, an embedding reads the
/// result, and the [`EdgePredictor`] scores the batch's positive and negative pairs.
///
/// The memory is deferred, as in TGL: [`forward`](Self::forward) reads the state as earlier
/// batches left it and returns the roots' updated memory; after the optimizer step,
/// [`memory_update`](Self::memory_update) turns it into the rows and mails to write.
#[derive(Module, Debug)]
pub struct TemporalModel<B: Backend> {
    /// Learned node inputs, `[embedded_nodes, dim_node]`, if configured.
    pub node_embedding: Option<Embedding<B>>,
    /// The memory updater; `None` for memoryless models.
    pub updater: Option<MemoryUpdater<B>>,
    /// Node features into the memory space, `dim_node → dim_memory` (memory models with node
    /// features).
    pub node_feat_map: Option<Linear<B>>,
    /// The identity embedding (APAN, JODIE).
    pub identity: Option<IdentityEmbedding<B>>,
    /// JODIE's time projection.
    pub jodie: Option<JodieTimeEmbedding<B>>,
    /// Temporal graph attention (TGN, TGAT).
    pub attention: Option<TemporalAttentionEmbedding<B>>,
    /// DySAT's embedding.
    pub dysat: Option<DysatEmbedding<B>>,
    /// The edge predictor.
    pub predictor: EdgePredictor<B>,
    /// Width of the node representations.
    pub dim_hidden: usize,
}

/// What [`TemporalModel::forward`] returns.
#[derive(Debug, Clone)]
pub struct TemporalOutput<B: Backend> {
    /// Logits of the positive events, `[events]`.
    pub positive: Tensor<B, 1>,
    /// Logits of the negative destinations, `[events, num_negatives]`.
    pub negative: Tensor<B, 2>,
    /// The roots' updated memory, `[roots, dim_memory]` (memory models only): the input of
    /// [`TemporalModel::memory_update`].
    pub memory: Option<Tensor<B, 2>>,
}

impl<B: Backend> TemporalModel<B> {
    /// Logits of the batch's positive and negative pairs.
    ///
    /// Each row's representation is its updated memory (plus its mapped node features) in a
    /// memory model, else its node features, else zeros; the embedding reads the roots' (and,
    /// for graph attention, their neighbours') representations; the predictor scores
    /// `(src, pos_dst)` and `(src, neg_dst)` pairs. The batch layout is [`TemporalBatch`]'s.
    ///
    /// # Panics
    ///
    /// If the batch lacks what the model reads (memory rows for a memory model, hops for graph
    /// attention, snapshots for DySAT) or its shapes disagree with the configuration.
    pub fn forward(&self, batch: TemporalBatch<B>) -> TemporalOutput<B> {
        let (events, negatives) = (batch.num_events(), batch.num_negatives);
        let mut levels = batch.levels.into_iter();
        let roots = levels
            .next()
            .expect("a temporal batch has a level of roots");
        assert_eq!(
            roots.len(),
            events * (2 + negatives),
            "the roots are the sources, destinations and negatives of whole events"
        );
        let root_time = roots.expanded(roots.time.clone());
        let root_last_update = roots
            .memory
            .as_ref()
            .map(|memory| roots.expanded(memory.last_update.clone()));
        let (h, memory) = self.representation(roots);
        let embedding = if let Some(attention) = &self.attention {
            let mut nodes = vec![h];
            nodes.extend(levels.map(|level| self.representation(level).0));
            attention.forward(TemporalNeighbourhood {
                nodes,
                hops: batch.hops,
            })
        } else if let Some(dysat) = &self.dysat {
            dysat.forward(batch.snapshots.expect("DySAT reads the batch's snapshots"))
        } else {
            let identity = self.identity.as_ref().expect("a model has one embedding");
            let h = identity.forward(h);
            match (&self.jodie, root_last_update) {
                (Some(jodie), Some(last_update)) => {
                    let delta_t = (root_time.clone() - last_update) / (root_time + 1.0);
                    jodie.forward(h, delta_t)
                }
                _ => h,
            }
        };
        let dim = embedding.dims()[1];
        let src = embedding.clone().narrow(0, 0, events);
        let pos_dst = embedding.clone().narrow(0, events, events);
        let neg_dst = embedding
            .narrow(0, 2 * events, events * negatives)
            .reshape([events, negatives, dim]);
        let (positive, negative) = self.predictor.forward(src, pos_dst, neg_dst);
        TemporalOutput {
            positive,
            negative,
            memory,
        }
    }

    /// The rows and mails the batch's events write, from the roots' updated memory of
    /// [`forward`](Self::forward) (`[roots, dim_memory]`, the first `2 · events` rows read),
    /// the events' times `[events]` and edge features `[events, dim_edge]`.
    ///
    /// Event `i` writes its source's memory and a mail `[mem_src || mem_dst || edge_feat]` to
    /// its source, and `[mem_dst || mem_src || edge_feat]` to its destination, both at its time.
    /// Apply it with [`MemoryWrite::apply`] after the optimizer step.
    pub fn memory_update(
        &self,
        memory: Tensor<B, 2>,
        time: Tensor<B, 1>,
        edge_feat: Option<Tensor<B, 2>>,
    ) -> MemoryWrite<B> {
        let events = time.dims()[0];
        let src = memory.clone().narrow(0, 0, events);
        let dst = memory.narrow(0, events, events);
        MemoryWrite::new(src, dst, time, edge_feat)
    }

    /// The learned inputs of nodes `ids` (`[rows]`), `[rows, dim_node]`; `None` without
    /// learned node inputs.
    ///
    /// # Panics
    ///
    /// If an id is at or past `embedded_nodes`.
    pub fn node_features(&self, ids: Tensor<B, 1, Int>) -> Option<Tensor<B, 2>> {
        self.node_embedding.as_ref().map(|embedding| {
            let rows = ids.dims()[0];
            let [_, dim] = embedding.weight.dims();
            embedding
                .forward(ids.reshape([1, rows]))
                .reshape([rows, dim])
        })
    }

    /// Representations of a level of rows, `[rows, dim_hidden]`, and (memory models) their
    /// updated memory: computed once per stored row, then gathered through the level's
    /// [`NodeRows::expand`].
    fn representation(&self, mut rows: NodeRows<B>) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
        let expand = rows.expand.take();
        let (h, memory) = self.stored_representation(rows);
        match expand {
            Some(index) => (
                h.select(0, index.clone()),
                memory.map(|memory| memory.select(0, index)),
            ),
            None => (h, memory),
        }
    }

    /// [`representation`](Self::representation) of each stored row of `rows`.
    fn stored_representation(&self, rows: NodeRows<B>) -> (Tensor<B, 2>, Option<Tensor<B, 2>>) {
        match &self.updater {
            Some(updater) => {
                let state = rows
                    .memory
                    .expect("a memory model reads the memory rows of every level");
                let memory = updater.forward(state, rows.time);
                let h = match (&self.node_feat_map, rows.features) {
                    (Some(map), Some(features)) => memory.clone() + map.forward(features),
                    _ => memory.clone(),
                };
                (h, Some(memory))
            }
            None => {
                let rows_count = rows.time.dims()[0];
                let device = rows.time.device();
                let h = rows
                    .features
                    .unwrap_or_else(|| Tensor::zeros([rows_count, self.dim_hidden], &device));
                (h, None)
            }
        }
    }
}
