use std::path::{Path, PathBuf};

use megagraph_graph::SequenceStrategy;
use megagraph_models::{GraphTransformerConfig, ModelPreset};
use serde::{Deserialize, Serialize};

use crate::attention::{AttentionConfig, AttentionMode};
use megagraph_parallel::CpMode;
use crate::error::{Result, TrainError};
use crate::features::FeaturePropagation;
use crate::mesh_plan::MeshPlan;
use crate::schedule::WarmupCosine;

mod random_split;
mod synthetic;

pub use random_split::{ClassSplitConfig, RatioSplitConfig};
pub use synthetic::{SyntheticConfig, SyntheticKind};

/// Everything that defines a training run. Read from TOML with [`TrainConfig::from_toml_file`];
/// every field has a default, so a file only names what it changes (see `configs/train/*.toml`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Where the graph comes from and how it becomes sequences.
    pub data: DataConfig,
    /// Parameters of the built-in synthetic dataset (used when `data.dataset` is unset).
    pub synthetic: SyntheticConfig,
    /// The Graph Transformer.
    pub model: ModelConfig,
    /// AdamW and its learning-rate schedule.
    pub optimizer: OptimizerConfig,
    /// Epochs, early stopping, seeds and outputs.
    pub training: TrainingConfig,
    /// How each optimizer step runs: one device, or a `pp x cp x dp` mesh of workers.
    pub mesh: MeshConfig,
    /// Which attention the steps run (full, or TorchGT's sparse and interleaved modes).
    pub attention: AttentionConfig,
}

/// Where shortest-path distances are measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DistanceKind {
    /// In the whole graph (paths may leave the sequence).
    Graph,
    /// In the subgraph induced by the sequence's nodes.
    Induced,
}

/// Data section (`[data]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// Dataset directory in the OGB node-property raw layout; unset = the built-in synthetic graph.
    pub dataset: Option<PathBuf>,
    /// Split scheme folder under `split/` (unset: the only or first one).
    pub split: Option<String>,
    /// A class-balanced random split drawn in place of the dataset's own
    /// (`[data.class_split]`, see [`ClassSplitConfig`]); unset (the default): the split folder's.
    pub class_split: Option<ClassSplitConfig>,
    /// A random split by shares of the labelled nodes drawn in place of the dataset's own
    /// (`[data.ratio_split]`, see [`RatioSplitConfig`]); unset (the default): the split folder's.
    pub ratio_split: Option<RatioSplitConfig>,
    /// Make every edge go both ways. Default: true.
    pub symmetrize: bool,
    /// Nodes per sequence. Default: 256.
    pub seq_len: usize,
    /// How nodes are grouped into sequences. Default: locality.
    pub sequences: SequenceStrategy,
    /// Largest exact shortest-path distance; farther pairs share one bucket. Default: 4.
    pub max_distance: u8,
    /// Where distances are measured. Default: graph.
    pub distance_scope: DistanceKind,
    /// The most adjacency entries one BFS source may examine when distance indexes are built;
    /// `0` = no cap (exact). With a cap, a row whose BFS hits it keeps exact distances for the
    /// pairs reached and reads the others as "farther": distances are never shorter than the
    /// truth. For graphs with hubs, where exact rows cost seconds each. Default: 0.
    pub max_bfs_arcs: usize,
    /// Batches whose distance rows a background thread builds ahead of the training step (and
    /// of evaluation); `0` = build each batch's rows when it is read. Unset (the default): none
    /// in the library; the command line builds 2 ahead on a GPU backend, where the CPU waits on
    /// the device, and none on the CPU backend, whose step already keeps every core busy.
    pub prefetch_batches: Option<usize>,
    /// Binary cache of parsed datasets (unset: `$MEGAGRAPH_CACHE` or `~/.cache/megagraph`).
    pub cache_dir: Option<PathBuf>,
    /// Do not read or write the binary cache. Default: false.
    pub no_cache: bool,
    /// Scale every feature row to unit L1 norm before anything else. Default: false.
    pub normalize_features: bool,
    /// Rounds of GCN-normalized feature propagation appended to the node features
    /// (`[X, ÂX, …, Â^k X]`); 0 = raw features only. Ignored for graphs without features.
    /// With `feature_propagation = "ppr"` it is APPNP's number of power-iteration steps K.
    /// Unset (default): 0 where the logits are propagated (`model.propagation_steps`), which
    /// spreads the predictions instead, and 2 elsewhere ([`TrainConfig::feature_hops`]).
    pub feature_hops: Option<usize>,
    /// How the propagated rounds become node inputs: `"concat"` (`[X, ÂX, …, Â^k X]`, width
    /// `(k + 1) × dim`) or `"ppr"` (APPNP's personalized-PageRank propagation: `[X, Z^K]` with
    /// `Z⁰ = X`, `Z^{t+1} = (1 − α) Â Z^t + α X`, K = `feature_hops`, α = `ppr_alpha`, width
    /// `2 × dim`). Default: concat.
    pub feature_propagation: FeaturePropagation,
    /// APPNP's teleport probability α of `feature_propagation = "ppr"`, in (0, 1]. Default: 0.1.
    pub ppr_alpha: f64,
    /// Probability that a node pair of a training batch is moved to the "farther" distance
    /// bucket (structure dropout on the spatial bias). Default: 0.0.
    pub structure_dropout: f64,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            dataset: None,
            split: None,
            class_split: None,
            ratio_split: None,
            symmetrize: true,
            seq_len: 256,
            sequences: SequenceStrategy::Locality,
            max_distance: 4,
            distance_scope: DistanceKind::Graph,
            max_bfs_arcs: 0,
            prefetch_batches: None,
            cache_dir: None,
            no_cache: false,
            normalize_features: false,
            feature_hops: None,
            feature_propagation: FeaturePropagation::Concat,
            ppr_alpha: 0.1,
            structure_dropout: 0.0,
        }
    }
}

/// The training split's share of the nodes below which a run on one device takes the
/// scarce-label defaults ([`RunContext::scarce_labels`]): Cora's public split labels 5% of the
/// nodes, CiteSeer's 4%; Amazon-Photo's and Actor's random splits 60%.
pub const SCARCE_LABEL_FRACTION: f64 = 0.1;

/// `model.propagation_steps` when it is unset and labels are scarce: APPNP's `K = 10`.
pub const DEFAULT_PROPAGATION_STEPS: usize = 10;

/// `training.consistency_weight` when it is unset and labels are scarce: GRAND's `λ = 1`.
pub const DEFAULT_CONSISTENCY_WEIGHT: f64 = 1.0;

/// `model.layer_scale` when it is unset and labels are scarce: each layer's branches start at a
/// tenth of their output.
pub const DEFAULT_LAYER_SCALE: f64 = 0.1;

/// What the unset fields of a [`TrainConfig`]'s recipe (`model.propagation_steps`,
/// `training.consistency_weight`, `data.feature_hops`, `model.input_dropout`,
/// `model.key_dropout`, `model.layer_scale`, `optimizer.lr`) default to depends on: where the
/// run trains and how many of its nodes carry training labels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunContext {
    /// Steps run on a mesh or across several nodes (the mesh engine).
    pub parallel: bool,
    /// Training nodes over all nodes of the graph.
    pub train_fraction: f64,
}

impl RunContext {
    /// A run whose defaults are the standard ones: no propagation of the logits, no consistency
    /// regularization, `[X, ÂX, Â²X]` inputs, input dropout 0.3, key dropout 0.2, no
    /// LayerScale, learning rate 0.002.
    pub const STANDARD: Self = Self {
        parallel: true,
        train_fraction: 1.0,
    };

    /// Whether the run takes the scarce-label defaults: on one device (where the propagation of
    /// the logits and the consistency regularization run) with a training split under
    /// [`SCARCE_LABEL_FRACTION`] of the nodes. They are the propagation of the logits
    /// ([`DEFAULT_PROPAGATION_STEPS`]), the consistency regularization
    /// ([`DEFAULT_CONSISTENCY_WEIGHT`]), raw features, key dropout 0.7, LayerScale
    /// ([`DEFAULT_LAYER_SCALE`]) and learning rate 0.0005.
    pub fn scarce_labels(&self) -> bool {
        !self.parallel && self.train_fraction < SCARCE_LABEL_FRACTION
    }
}

/// Model section (`[model]`). Unset fields come from the preset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Named size: `small` (default) or `paper` (16 layers, 8 heads, hidden = FFN = 64).
    pub preset: ModelPreset,
    /// Number of layers (overrides the preset).
    pub layers: Option<usize>,
    /// Number of attention heads (overrides the preset).
    pub heads: Option<usize>,
    /// Model width (overrides the preset).
    pub hidden: Option<usize>,
    /// FFN hidden width (overrides the preset).
    pub ffn_hidden: Option<usize>,
    /// Dropout in the layers. Default: 0.5.
    pub dropout: f64,
    /// Dropout on the raw input features. Unset (default): 0.8 where labels are scarce
    /// ([`RunContext::scarce_labels`]), 0.3 elsewhere ([`TrainConfig::input_dropout`]).
    pub input_dropout: Option<f64>,
    /// DropNode (GRAND): while training, each node's whole encoded input is zeroed with this
    /// probability (the others scaled by `1 / (1 - p)`), so the node is known only through its
    /// structural encodings and the nodes it attends to. Default: 0.0 (off).
    pub node_dropout: f64,
    /// Degree clamp of the centrality encoding. Default: 64.
    pub max_degree: usize,
    /// Initial per-hop decay of the spatial bias. Default: 2.0.
    pub spatial_initial_decay: f64,
    /// Key tile of the attention op. Default: 128.
    pub block_size: usize,
    /// Attention key dropout: while training, each layer hides each key from all queries with
    /// this probability. Unset (default): 0.7 where labels are scarce
    /// ([`RunContext::scarce_labels`]), 0.2 elsewhere ([`TrainConfig::key_dropout`]).
    pub key_dropout: Option<f64>,
    /// LayerScale (CaiT): every layer's attention and feed-forward outputs are multiplied by a
    /// learned per-channel vector that starts at this value, so a small value starts each layer
    /// near the identity; 0 turns it off. Unset (default): [`DEFAULT_LAYER_SCALE`] where labels
    /// are scarce ([`RunContext::scarce_labels`]), off elsewhere ([`TrainConfig::layer_scale`]).
    pub layer_scale: Option<f64>,
    /// Graphormer's graph token: one learned position per sequence joined to every node, with
    /// its own learned spatial bias per head (a "virtual distance"); its output is dropped
    /// before the classifier. One device only (mesh 1 x 1 x 1) and full attention.
    /// Default: false.
    pub graph_token: bool,
    /// Graphormer's edge encoding: per pair the mean over one shortest path (up to
    /// `data.max_distance` hops) of the edge features, projected per hop and head, added to
    /// every layer's logits. Needs a dataset with edge features (`raw/edge-feat.csv`, or
    /// `[synthetic] edge_feature_dim`), one device (mesh 1 x 1 x 1) and full attention.
    /// Default: false.
    pub edge_encoding: bool,
    /// APPNP's predict-then-propagate head ([`PredictionPropagation`](crate::PredictionPropagation)):
    /// rounds `K` of `Z ← (1 − α) Â Z + α H` over the logits `H`, the loss taken on `Z`. A step
    /// propagates over its batch's nodes (exact APPNP when the batch holds every sequence),
    /// evaluation over the whole graph. One device only (mesh 1 x 1 x 1). Applies to
    /// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) (the command line's
    /// loop); burn-train's [`MegaGraphTrainer`](crate::MegaGraphTrainer) scores the model's own
    /// logits. `0` turns it off. Unset (default): [`DEFAULT_PROPAGATION_STEPS`] where labels are
    /// scarce ([`RunContext::scarce_labels`]: one device, a small training split), off elsewhere
    /// ([`TrainConfig::propagation_steps`]); set above 0 on a mesh, it is refused.
    pub propagation_steps: Option<usize>,
    /// Teleport probability `α` of `propagation_steps`, in (0, 1]. Default: 0.1.
    pub propagation_alpha: f64,
    /// APPNP's dropout on the adjacency matrix: while training, each round of
    /// `propagation_steps` drops every entry of `Â` (self loops included) with this
    /// probability and scales the others by `1 / (1 − p)`; evaluation propagates with `Â`
    /// whole. In [0, 1). Default: 0.0 (off).
    pub propagation_edge_dropout: f64,
    /// GRAND's random propagation ([`InputPropagation`](crate::InputPropagation)): the encoded
    /// node rows, after DropNode (`node_dropout`), replaced by their mean over `0..=K` hops of
    /// `Â` before the layers run. A step propagates over its batch's nodes, evaluation over each
    /// evaluation batch's, so it is meant for batches that hold the whole graph (`seq_len` at
    /// least the node count). One device only (mesh 1 x 1 x 1); burn-train's
    /// [`MegaGraphTrainer`](crate::MegaGraphTrainer) does not apply it. Default: 0 (off).
    pub input_propagation_steps: usize,
    /// UniMP's label input ([`LabelInput`](crate::LabelInput)): a learned embedding of each
    /// node's class, shown for a random part (`training.label_input_rate`) of the training
    /// nodes of a step, whose loss is taken on the others; evaluation shows every training
    /// node's label. One device only (mesh 1 x 1 x 1); burn-train's
    /// [`MegaGraphTrainer`](crate::MegaGraphTrainer) shows no labels. Default: false.
    pub label_input: bool,
    /// Layer norm before the classifier ([`GraphTransformerConfig::final_norm`]). Off, the
    /// logits scale with the weights, so that `optimizer.layer_l2` and
    /// `optimizer.classifier_l2` bound them, as in GRAND's and GCN's unnormalized MLPs. One
    /// device only (mesh 1 x 1 x 1). Default: true.
    pub final_norm: bool,
}

impl Default for ModelConfig {
    /// The model's own defaults ([`GraphTransformerConfig`]'s) with this trainer's dropout
    /// recipe (dropout 0.5, input dropout 0.8; key dropout unset).
    fn default() -> Self {
        let model = GraphTransformerConfig::new(1, 2);
        Self {
            preset: ModelPreset::default(),
            layers: None,
            heads: None,
            hidden: None,
            ffn_hidden: None,
            dropout: 0.5,
            input_dropout: None,
            node_dropout: 0.0,
            max_degree: model.max_degree,
            spatial_initial_decay: model.spatial_initial_decay,
            block_size: model.block_size,
            key_dropout: None,
            layer_scale: model.layer_scale,
            graph_token: model.graph_token,
            edge_encoding: false,
            propagation_steps: None,
            propagation_alpha: 0.1,
            propagation_edge_dropout: 0.0,
            input_propagation_steps: 0,
            label_input: false,
            final_norm: model.final_norm,
        }
    }
}

/// Optimizer section (`[optimizer]`): AdamW with linear warm-up then cosine decay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    /// Peak learning rate. Unset (default): 0.0005 where labels are scarce
    /// ([`RunContext::scarce_labels`]), 0.002 elsewhere ([`TrainConfig::lr`]).
    pub lr: Option<f64>,
    /// Decoupled weight decay. Default: 0.005.
    pub weight_decay: f64,
    /// L2 penalty `λ` of the input projection: `λ/2 ‖W‖²` of the weights that map the node
    /// features is added to the loss. This is the coupled weight decay of GCN's and APPNP's Adam,
    /// which, unlike the decoupled decay, is normalized with the gradient and so pulls the
    /// weights of rarely seen sparse features to zero. One device only (mesh 1 x 1 x 1);
    /// burn-train's [`MegaGraphTrainer`](crate::MegaGraphTrainer) does not apply it.
    /// Default: 0.0 (off).
    pub input_l2: f64,
    /// L2 penalty `λ` of the layers: `λ/2 Σ ‖W‖²` of the weight matrices of every layer's
    /// attention (query, key, value, output) and feed-forward network, added to the loss
    /// (coupled, as `input_l2`). One device only (mesh 1 x 1 x 1); burn-train's
    /// [`MegaGraphTrainer`](crate::MegaGraphTrainer) does not apply it. Default: 0.0 (off).
    pub layer_l2: f64,
    /// L2 penalty `λ` of the classifier: `λ/2 ‖W‖²` of its weight matrix, added to the loss
    /// (coupled, as `input_l2`). Where `model.final_norm` is off it bounds the logits' scale.
    /// One device only (mesh 1 x 1 x 1); burn-train's
    /// [`MegaGraphTrainer`](crate::MegaGraphTrainer) does not apply it. Default: 0.0 (off).
    pub classifier_l2: f64,
    /// Epochs of linear warm-up. Default: 5.
    pub warmup_epochs: usize,
    /// Final learning rate as a fraction of `lr`. Default: 0.05.
    pub min_lr_ratio: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self {
            lr: None,
            weight_decay: 5e-3,
            input_l2: 0.0,
            layer_l2: 0.0,
            classifier_l2: 0.0,
            warmup_epochs: 5,
            min_lr_ratio: 0.05,
        }
    }
}

/// Training section (`[training]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainingConfig {
    /// Seed of everything random (data, initialization, dropout). Default: 0.
    pub seed: u64,
    /// Maximum number of epochs. Default: 200.
    pub epochs: usize,
    /// Stop after this many epochs without a better validation accuracy (0 = never). Default: 50.
    pub patience: usize,
    /// Sequences per optimizer step. Default: 4.
    pub batch_size: usize,
    /// Write metrics as JSON to this file.
    pub metrics_out: Option<PathBuf>,
    /// Write a checkpoint here after every epoch.
    pub checkpoint_dir: Option<PathBuf>,
    /// Continue from the last checkpoint in `checkpoint_dir`.
    pub resume: bool,
    /// Write SVG training curves (`loss.svg`, `accuracy.svg`) into this directory.
    pub plot_dir: Option<PathBuf>,
    /// Stop after this many optimizer steps in total (counted across epochs, and across a
    /// resume); the epoch in progress is then evaluated and the run ends normally. The
    /// learning-rate schedule still spans `epochs`. Unset (default): no limit.
    pub max_steps: Option<usize>,
    /// Label smoothing ε of the cross-entropy: the target puts `1 − ε` on the label and `ε / C`
    /// on each of the `C` classes, in [0, 1). Default: 0.0.
    pub label_smoothing: f64,
    /// Correct & Smooth (Huang et al. 2021) of the model's softmax predictions at every
    /// evaluation, from the training labels only ([`CorrectAndSmooth`](crate::CorrectAndSmooth)):
    /// the validation accuracy that picks the best epoch and stops early, and the test accuracy
    /// reported, are those of the post-processed predictions. Applies to
    /// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) (the command line's loop);
    /// burn-train's [`MegaGraphTrainer`](crate::MegaGraphTrainer) scores batches and does not
    /// post-process. Default: false.
    pub correct_smooth: bool,
    /// Correct & Smooth's `α₁`: `E ← (1 − α₁) E⁰ + α₁ Â E` spreads the training error, in
    /// [0, 1]. Default: 0.8.
    pub correct_alpha: f64,
    /// Correct & Smooth's `α₂`: `G ← (1 − α₂) G⁰ + α₂ Â G` spreads the corrected predictions, in
    /// [0, 1]. Default: 0.8.
    pub smooth_alpha: f64,
    /// Rounds `K` of each of Correct & Smooth's two propagations, at least 1. Default: 50.
    pub correct_smooth_steps: usize,
    /// Fixed scale of Correct & Smooth's correction (`P' = P + s E`), positive; unset
    /// (default): autoscale, each row's correction as large (L1) as the mean training error.
    pub correct_scale: Option<f64>,
    /// Weight `λ` of GRAND's consistency regularization
    /// ([`ConsistencyRegularization`](crate::ConsistencyRegularization)): each step runs the
    /// model `consistency_samples` times under dropout and pulls every node's predictions
    /// towards their sharpened mean. Single-device steps of
    /// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) only (not
    /// [`MegaGraphTrainer`](crate::MegaGraphTrainer)). `0` turns it off. Unset (default):
    /// [`DEFAULT_CONSISTENCY_WEIGHT`] where labels are scarce ([`RunContext::scarce_labels`]),
    /// off elsewhere ([`TrainConfig::consistency_weight`]); set above 0 on a mesh, it is refused.
    pub consistency_weight: Option<f64>,
    /// Forward passes per step of the consistency regularization, at least 2. Default: 2.
    pub consistency_samples: usize,
    /// Sharpening temperature of the consistency regularization, in (0, 1]. Default: 0.5.
    pub consistency_temperature: f64,
    /// With `model.label_input`: the probability that a training node shows its label in a
    /// step (drawn per node and step); the loss is taken on the training nodes that do not,
    /// in (0, 1). Default: 0.5.
    pub label_input_rate: f64,
    /// Rounds of self-training after the first training run: each round trains a fresh model
    /// in which every node outside the training and validation splits that the previous
    /// round's best model predicts with probability at least `self_training_threshold` joins
    /// the training loss with that prediction as its label (a pseudo-label; no test label is
    /// read). The run keeps the round with the best validation accuracy (the earliest on a
    /// tie). One device only, without checkpoints or the label input, in
    /// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) (the command line's
    /// loop). Default: 0 (off).
    pub self_training_rounds: usize,
    /// Confidence a prediction needs to become a pseudo-label, in (0, 1). Default: 0.9.
    pub self_training_threshold: f64,
    /// Snapshot ensemble: the softmax predictions of the `ensemble_epochs` epochs with the best
    /// validation accuracy (the earlier epoch on a tie) are averaged, and the run's
    /// `best_valid_accuracy` and `test_accuracy` are those of the mean
    /// ([`TrainReport::ensemble`](crate::TrainReport::ensemble) names the epochs); the returned
    /// model stays the best epoch's. Early stopping still reads each epoch's own accuracy.
    /// Holds `ensemble_epochs × nodes × classes` floats on the host. Applied by
    /// [`NodeClassificationTrainer`](crate::NodeClassificationTrainer) (the command line's
    /// loop); refused beside `correct_smooth`, and beside `checkpoint_dir` (the kept
    /// predictions are not checkpointed). Default: 0 (off; 1, the best epoch alone, is the
    /// same).
    pub ensemble_epochs: usize,
}

impl Default for TrainingConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            epochs: 200,
            patience: 50,
            batch_size: 4,
            metrics_out: None,
            checkpoint_dir: None,
            resume: false,
            plot_dir: None,
            max_steps: None,
            label_smoothing: 0.0,
            correct_smooth: false,
            correct_alpha: 0.8,
            smooth_alpha: 0.8,
            correct_smooth_steps: 50,
            correct_scale: None,
            consistency_weight: None,
            consistency_samples: 2,
            consistency_temperature: 0.5,
            label_input_rate: 0.5,
            self_training_rounds: 0,
            self_training_threshold: 0.9,
            ensemble_epochs: 0,
        }
    }
}

/// Mesh section (`[mesh]`): the hybrid parallel layout of every optimizer step. A step processes
/// the same `training.batch_size` sequences whatever the layout (sharded over `dp` replicas, split
/// into `micro_batches` for the pipeline and into `cp` blocks per sequence), so with dropout 0 a
/// run's losses equal the single-device run's. The default, `1 x 1 x 1`, trains on one device
/// without worker threads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MeshConfig {
    /// Pipeline-parallel stages. Default: 1.
    pub pp: usize,
    /// Context-parallel blocks per sequence. Default: 1.
    pub cp: usize,
    /// Data-parallel replicas; must divide `training.batch_size`. Default: 1.
    pub dp: usize,
    /// Pipeline micro-batches per step and replica. Default: 1.
    pub micro_batches: usize,
    /// Layers of each pipeline stage (`pp` entries summing to the layer count; stage 0 also
    /// holds the embedding stage). Unset: as even as possible.
    pub stage_layers: Option<Vec<usize>>,
    /// Take the layout from a plan instead of the fields above: the path of a JSON file written
    /// by `megagraph plan --json` (its `best` plan), or `"auto"` to plan for `cluster` (or this
    /// machine) now. Unset: use the fields above.
    pub plan: Option<MeshPlan>,
    /// Cluster description used by `plan = "auto"`. Unset: this machine, its CPU cores as
    /// workers sharing its memory (detected).
    pub cluster: Option<PathBuf>,
    /// How the `cp` ranks of a context group attend: `"ring"` (graph-aware ring attention) or
    /// `"ulysses"` (all-to-alls over the heads; `heads` must be a multiple of `cp`). Unset: the
    /// plan's mode with `plan`, `ring` otherwise; set, it overrides the plan's (and
    /// `plan = "auto"` searches that mode only).
    pub cp_mode: Option<CpMode>,
}

impl Default for MeshConfig {
    fn default() -> Self {
        Self {
            pp: 1,
            cp: 1,
            dp: 1,
            micro_batches: 1,
            stage_layers: None,
            plan: None,
            cluster: None,
            cp_mode: None,
        }
    }
}

impl MeshConfig {
    /// A mesh of `pp` stages (layers split as evenly as possible), `cp` context blocks, `dp`
    /// replicas and `micro_batches` micro-batches.
    pub fn new(pp: usize, cp: usize, dp: usize, micro_batches: usize) -> Self {
        Self {
            pp,
            cp,
            dp,
            micro_batches,
            ..Self::default()
        }
    }

    /// Whether the run uses a mesh of workers (any degree above 1, a stage split, or a plan).
    pub fn is_parallel(&self) -> bool {
        self.pp * self.cp * self.dp * self.micro_batches > 1 || self.stage_layers.is_some() || self.plan.is_some()
    }
}

impl TrainConfig {
    /// The rounds of APPNP's propagation of the logits a run in `run` makes:
    /// `model.propagation_steps`, or when it is unset [`DEFAULT_PROPAGATION_STEPS`] where labels
    /// are scarce ([`RunContext::scarce_labels`]) and 0 (off) elsewhere.
    pub fn propagation_steps(&self, run: RunContext) -> usize {
        self.model
            .propagation_steps
            .unwrap_or(if run.scarce_labels() { DEFAULT_PROPAGATION_STEPS } else { 0 })
    }

    /// The weight of the consistency regularization a run in `run` adds:
    /// `training.consistency_weight`, or when it is unset [`DEFAULT_CONSISTENCY_WEIGHT`] where
    /// labels are scarce and 0 (off) elsewhere.
    pub fn consistency_weight(&self, run: RunContext) -> f64 {
        self.training
            .consistency_weight
            .unwrap_or(if run.scarce_labels() { DEFAULT_CONSISTENCY_WEIGHT } else { 0.0 })
    }

    /// The rounds of feature propagation appended to the node features: `data.feature_hops`,
    /// or when it is unset 0 where the logits are propagated
    /// ([`propagation_steps`](Self::propagation_steps) above 0) and 2 elsewhere.
    pub fn feature_hops(&self, run: RunContext) -> usize {
        self.data
            .feature_hops
            .unwrap_or(if self.propagation_steps(run) > 0 { 0 } else { 2 })
    }

    /// The dropout on the raw input features: `model.input_dropout`, or when it is unset 0.8
    /// where labels are scarce and 0.3 elsewhere.
    pub fn input_dropout(&self, run: RunContext) -> f64 {
        self.model
            .input_dropout
            .unwrap_or(if run.scarce_labels() { 0.8 } else { 0.3 })
    }

    /// The attention key dropout: `model.key_dropout`, or when it is unset 0.7 where labels are
    /// scarce and 0.2 elsewhere.
    pub fn key_dropout(&self, run: RunContext) -> f64 {
        self.model
            .key_dropout
            .unwrap_or(if run.scarce_labels() { 0.7 } else { 0.2 })
    }

    /// The initial LayerScale of every layer, `None` for none: `model.layer_scale` (0: none),
    /// or when it is unset [`DEFAULT_LAYER_SCALE`] where labels are scarce and none elsewhere.
    pub fn layer_scale(&self, run: RunContext) -> Option<f64> {
        match self.model.layer_scale {
            Some(scale) => (scale > 0.0).then_some(scale),
            None => run.scarce_labels().then_some(DEFAULT_LAYER_SCALE),
        }
    }

    /// The peak learning rate: `optimizer.lr`, or when it is unset 0.0005 where labels are scarce
    /// and 0.002 elsewhere.
    pub fn lr(&self, run: RunContext) -> f64 {
        self.optimizer
            .lr
            .unwrap_or(if run.scarce_labels() { 0.0005 } else { 0.002 })
    }

    /// Refuses, when the run is `parallel` (a mesh, or several nodes), what runs on one device
    /// only, naming the first such field that is on: the propagation of the logits or the
    /// consistency regularization set above 0 (unset, they are off there), the random
    /// propagation, the label input, the L2 penalties, a head without its final norm and
    /// self-training.
    pub(crate) fn check_one_device_only(&self, parallel: bool) -> Result<()> {
        if !parallel {
            return Ok(());
        }
        let one_device_only = [
            ("training.consistency_weight", self.training.consistency_weight.is_some_and(|weight| weight > 0.0)),
            ("model.propagation_steps", self.model.propagation_steps.is_some_and(|steps| steps > 0)),
            ("model.input_propagation_steps", self.model.input_propagation_steps > 0),
            ("model.label_input", self.model.label_input),
            ("optimizer.input_l2", self.optimizer.input_l2 > 0.0),
            ("optimizer.layer_l2", self.optimizer.layer_l2 > 0.0),
            ("optimizer.classifier_l2", self.optimizer.classifier_l2 > 0.0),
            ("model.final_norm", !self.model.final_norm),
            ("training.self_training_rounds", self.training.self_training_rounds > 0),
        ];
        match one_device_only.into_iter().find(|&(_, on)| on) {
            Some((field, _)) => Err(TrainError::InvalidConfig {
                field,
                reason: "runs on one device only: set mesh.pp = cp = dp = micro_batches = 1, on one node".into(),
            }),
            None => Ok(()),
        }
    }

    /// This configuration with every unset field of the recipe set to its value for `run`
    /// (each field's own method says which).
    pub fn resolved(&self, run: RunContext) -> Self {
        let mut config = self.clone();
        config.model.propagation_steps = Some(self.propagation_steps(run));
        config.training.consistency_weight = Some(self.consistency_weight(run));
        config.data.feature_hops = Some(self.feature_hops(run));
        config.model.key_dropout = Some(self.key_dropout(run));
        config.model.input_dropout = Some(self.input_dropout(run));
        config.model.layer_scale = Some(self.layer_scale(run).unwrap_or(0.0));
        config.optimizer.lr = Some(self.lr(run));
        config
    }

    /// Reads a TOML config file.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| TrainError::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text).map_err(|message| TrainError::ConfigParse {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses TOML text; the error names the line and column.
    pub fn from_toml_str(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|err| {
            let location = err
                .span()
                .map(|span| {
                    let line = text[..span.start].matches('\n').count() + 1;
                    let column = span.start - text[..span.start].rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("line {line}, column {column}: ")
                })
                .unwrap_or_default();
            format!("{location}{}", err.message())
        })
    }

    /// Checks ranges that do not depend on the data.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field, reason: &str| {
            Err(TrainError::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        let probability = |p: f64| (0.0..1.0).contains(&p);
        let open_probability = |p: f64| p > 0.0 && p < 1.0;
        if self.data.seq_len < 2 {
            return invalid("data.seq_len", "must be at least 2");
        }
        if let Some(class_split) = &self.data.class_split {
            if self.data.split.is_some() {
                return invalid("data.class_split", "replaces the dataset's split: leave data.split unset");
            }
            if self.data.ratio_split.is_some() {
                return invalid("data.class_split", "and data.ratio_split are two random splits: set one");
            }
            class_split.validate()?;
        }
        if let Some(ratio_split) = &self.data.ratio_split {
            if self.data.split.is_some() {
                return invalid("data.ratio_split", "replaces the dataset's split: leave data.split unset");
            }
            ratio_split.validate()?;
        }
        if self.data.max_distance > 254 {
            return invalid("data.max_distance", "must be at most 254 (distances are stored as u8)");
        }
        if !probability(self.model.dropout) {
            return invalid("model.dropout", "must be in [0, 1)");
        }
        if !probability(self.model.node_dropout) {
            return invalid("model.node_dropout", "must be in [0, 1)");
        }
        if !probability(self.data.structure_dropout) {
            return invalid("data.structure_dropout", "must be in [0, 1)");
        }
        if self.model.key_dropout.is_some_and(|p| !probability(p)) {
            return invalid("model.key_dropout", "must be in [0, 1)");
        }
        if !probability(self.model.propagation_edge_dropout) {
            return invalid("model.propagation_edge_dropout", "must be in [0, 1)");
        }
        if self.model.layer_scale.is_some_and(|scale| !(scale.is_finite() && scale >= 0.0)) {
            return invalid("model.layer_scale", "must be a number at least 0 (0: off)");
        }
        if !probability(self.training.label_smoothing) {
            return invalid("training.label_smoothing", "must be in [0, 1)");
        }
        for (field, alpha) in [
            ("training.correct_alpha", self.training.correct_alpha),
            ("training.smooth_alpha", self.training.smooth_alpha),
        ] {
            if !(0.0..=1.0).contains(&alpha) {
                return invalid(field, "must be in [0, 1]");
            }
        }
        if self.training.correct_smooth_steps == 0 {
            return invalid("training.correct_smooth_steps", "must be at least 1");
        }
        if self.training.correct_scale.is_some_and(|s| !(s > 0.0 && s.is_finite())) {
            return invalid("training.correct_scale", "must be a positive number (unset = autoscale)");
        }
        if !(self.data.ppr_alpha > 0.0 && self.data.ppr_alpha <= 1.0) {
            return invalid("data.ppr_alpha", "must be in (0, 1]");
        }
        if !(self.model.propagation_alpha > 0.0 && self.model.propagation_alpha <= 1.0) {
            return invalid("model.propagation_alpha", "must be in (0, 1]");
        }
        if self.training.consistency_weight.is_some_and(|weight| !(weight >= 0.0 && weight.is_finite())) {
            return invalid("training.consistency_weight", "must be a non-negative number (0 = off)");
        }
        if self.training.consistency_samples < 2 {
            return invalid("training.consistency_samples", "must be at least 2");
        }
        if !(self.training.consistency_temperature > 0.0 && self.training.consistency_temperature <= 1.0) {
            return invalid("training.consistency_temperature", "must be in (0, 1]");
        }
        if !open_probability(self.training.label_input_rate) {
            return invalid("training.label_input_rate", "must be in (0, 1)");
        }
        if !open_probability(self.training.self_training_threshold) {
            return invalid("training.self_training_threshold", "must be in (0, 1)");
        }
        if self.training.self_training_rounds > 0 && self.training.checkpoint_dir.is_some() {
            return invalid(
                "training.self_training_rounds",
                "runs without checkpoints (its rounds are not saved): leave training.checkpoint_dir unset",
            );
        }
        if self.training.ensemble_epochs > 1 && self.training.correct_smooth {
            return invalid(
                "training.ensemble_epochs",
                "does not combine with training.correct_smooth (the ensemble averages the model's own predictions)",
            );
        }
        if self.training.ensemble_epochs > 1 && self.training.checkpoint_dir.is_some() {
            return invalid(
                "training.ensemble_epochs",
                "runs without checkpoints (its epochs' predictions are not saved): leave training.checkpoint_dir unset",
            );
        }
        if self.training.self_training_rounds > 0 && self.model.label_input {
            return invalid(
                "training.self_training_rounds",
                "does not combine with model.label_input (the label input shows true training labels only)",
            );
        }
        self.check_one_device_only(self.mesh.is_parallel())?;
        if self.model.input_dropout.is_some_and(|p| !probability(p)) {
            return invalid("model.input_dropout", "must be in [0, 1)");
        }
        if self.model.block_size == 0 {
            return invalid("model.block_size", "must be positive");
        }
        if self.optimizer.lr.is_some_and(|lr| !(lr > 0.0 && lr.is_finite())) {
            return invalid("optimizer.lr", "must be a positive number");
        }
        if !(0.0..=1.0).contains(&self.optimizer.min_lr_ratio) {
            return invalid("optimizer.min_lr_ratio", "must be in [0, 1]");
        }
        if self.optimizer.weight_decay < 0.0 {
            return invalid("optimizer.weight_decay", "must not be negative");
        }
        for (field, l2) in [
            ("optimizer.input_l2", self.optimizer.input_l2),
            ("optimizer.layer_l2", self.optimizer.layer_l2),
            ("optimizer.classifier_l2", self.optimizer.classifier_l2),
        ] {
            if !(l2 >= 0.0 && l2.is_finite()) {
                return invalid(field, "must be a non-negative number (0 = off)");
            }
        }
        if self.training.epochs == 0 {
            return invalid("training.epochs", "must be at least 1");
        }
        if self.training.batch_size == 0 {
            return invalid("training.batch_size", "must be at least 1");
        }
        if self.training.resume && self.training.checkpoint_dir.is_none() {
            return invalid("training.resume", "needs training.checkpoint_dir (--checkpoint-dir)");
        }
        let (heads, hidden) = self.model_shape();
        if heads == 0 || hidden % heads != 0 {
            return invalid(
                "model.hidden",
                &format!("must be a positive multiple of model.heads ({hidden} is not a multiple of {heads})"),
            );
        }
        for (field, value) in [
            ("mesh.pp", self.mesh.pp),
            ("mesh.cp", self.mesh.cp),
            ("mesh.dp", self.mesh.dp),
            ("mesh.micro_batches", self.mesh.micro_batches),
        ] {
            if value == 0 {
                return invalid(field, "must be at least 1");
            }
        }
        if self.mesh.cluster.is_some() && self.mesh.plan != Some(MeshPlan::Auto) {
            return invalid("mesh.cluster", "is only used with mesh.plan = \"auto\" (--plan auto)");
        }
        if self.model.graph_token {
            if self.mesh.is_parallel() {
                return invalid("model.graph_token", "runs on one device only: set mesh.pp = cp = dp = micro_batches = 1");
            }
            if self.data.max_distance > 253 {
                return invalid("model.graph_token", "needs data.max_distance <= 253 (its bucket follows the distances)");
            }
        }
        if self.model.edge_encoding {
            if self.mesh.cp > 1 && self.mesh.cp_mode == Some(CpMode::Ulysses) {
                return invalid(
                    "mesh.cp_mode",
                    "the edge encoding runs with cp > 1 on the ring only (cp_mode = \"ring\"): Ulysses' all-to-all would communicate its bias",
                );
            }
            if self.attention.mode != AttentionMode::Full {
                return invalid("model.edge_encoding", "needs attention.mode = \"full\" (sparse attention takes no dense bias)");
            }
            if self.data.max_distance == 0 {
                return invalid("model.edge_encoding", "needs data.max_distance >= 1 (paths of at least one hop)");
            }
        }
        if self.training.max_steps == Some(0) {
            return invalid("training.max_steps", "must be at least 1 (unset = no limit)");
        }
        self.synthetic.validate()?;
        self.attention.validate()?;
        Ok(())
    }

    fn model_shape(&self) -> (usize, usize) {
        let base = self.model.preset.apply(GraphTransformerConfig::new(1, 2));
        (
            self.model.heads.unwrap_or(base.num_heads),
            self.model.hidden.unwrap_or(base.hidden),
        )
    }

    /// The learning-rate schedule of `[optimizer]` and `training.epochs` for epochs of
    /// `steps_per_epoch` steps (a burn-train `Learner` gets it from
    /// [`WarmupCosine::scheduler`]). An unset `optimizer.lr` is the standard 0.002: the trainer
    /// calls this on its [`resolved`](Self::resolved) configuration.
    pub fn schedule(&self, steps_per_epoch: usize) -> WarmupCosine {
        WarmupCosine {
            peak: self.lr(RunContext::STANDARD),
            warmup_steps: self.optimizer.warmup_epochs * steps_per_epoch,
            total_steps: self.training.epochs * steps_per_epoch,
            min_ratio: self.optimizer.min_lr_ratio,
        }
    }

    /// The model configuration for a dataset with `feature_dim`, `num_nodes` and `num_classes`
    /// (without the edge encoding, whose width is the dataset's: the trainer adds it). An unset
    /// `model.input_dropout`, `model.key_dropout` or `model.layer_scale` is the standard one
    /// (0.3; 0.2; no LayerScale): the
    /// trainer calls this on its [`resolved`](Self::resolved) configuration.
    pub fn model_config(&self, feature_dim: Option<usize>, num_nodes: usize, num_classes: usize) -> GraphTransformerConfig {
        let base = self
            .model
            .preset
            .apply(GraphTransformerConfig::new(num_nodes, num_classes).with_feature_dim(feature_dim));
        let m = &self.model;
        GraphTransformerConfig {
            num_layers: m.layers.unwrap_or(base.num_layers),
            num_heads: m.heads.unwrap_or(base.num_heads),
            hidden: m.hidden.unwrap_or(base.hidden),
            ffn_hidden: m.ffn_hidden.unwrap_or(base.ffn_hidden),
            ..base
        }
        .with_dropout(m.dropout)
        .with_input_dropout(self.input_dropout(RunContext::STANDARD))
        .with_node_dropout(m.node_dropout)
        .with_max_degree(m.max_degree)
        .with_max_distance(self.data.max_distance)
        .with_spatial_initial_decay(m.spatial_initial_decay)
        .with_block_size(m.block_size)
        .with_key_dropout(self.key_dropout(RunContext::STANDARD))
        .with_graph_token(m.graph_token)
        .with_label_input(m.label_input)
        .with_final_norm(m.final_norm)
        .with_layer_scale(self.layer_scale(RunContext::STANDARD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that the config `text` parses and that validation refuses it, naming `field`.
    fn assert_refused(text: &str, field: &str) {
        let config = TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        match config.validate() {
            Err(TrainError::InvalidConfig { field: got, .. }) => assert_eq!(got, field, "{text}"),
            other => panic!("{text}: expected a refusal naming {field}, got {other:?}"),
        }
    }

    #[test]
    fn every_example_config_parses_and_validates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/train");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.extension().is_some_and(|ext| ext == "toml") {
                let config = TrainConfig::from_toml_file(&path).unwrap_or_else(|e| panic!("{e}"));
                config.validate().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                files += 1;
            }
        }
        assert!(files > 0, "no configs in {}", dir.display());
    }

    #[test]
    fn mesh_plan_and_preset_read_as_enums() {
        let config = TrainConfig::from_toml_str("[model]\npreset = \"paper\"\n[mesh]\nplan = \"auto\"\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.model.preset, ModelPreset::Paper);
        assert_eq!(config.mesh.plan, Some(MeshPlan::Auto));
        let config =
            TrainConfig::from_toml_str("[mesh]\nplan = \"plan.json\"\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.mesh.plan, Some(MeshPlan::File("plan.json".into())));
    }

    #[test]
    fn layer_scale_reaches_the_model_and_must_not_be_negative() {
        let config = TrainConfig::from_toml_str("[model]\nlayer_scale = 0.1\n").unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.model_config(Some(3), 10, 2).layer_scale, Some(0.1));
        // unresolved, an unset scale is the standard run's: none
        assert_eq!(TrainConfig::default().model_config(Some(3), 10, 2).layer_scale, None);
        let off = TrainConfig::from_toml_str("[model]\nlayer_scale = 0.0\n").unwrap_or_else(|e| panic!("{e}"));
        off.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(off.model_config(Some(3), 10, 2).layer_scale, None);
        for refused in ["-0.1", "inf", "nan"] {
            assert_refused(&format!("[model]\nlayer_scale = {refused}\n"), "model.layer_scale");
        }
    }

    #[test]
    fn node_dropout_reaches_the_model_and_must_be_a_probability() {
        let config = TrainConfig::from_toml_str("[model]\nnode_dropout = 0.3\n").unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.model_config(Some(3), 10, 2).node_dropout, 0.3);
        assert_eq!(TrainConfig::default().model_config(Some(3), 10, 2).node_dropout, 0.0);
        for refused in ["1.0", "-0.1"] {
            assert_refused(&format!("[model]\nnode_dropout = {refused}\n"), "model.node_dropout");
        }
    }

    #[test]
    fn the_graph_token_reaches_the_model_runs_sparse_attention_and_is_refused_on_a_mesh() {
        let config = TrainConfig::from_toml_str("[model]\ngraph_token = true\n").unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        assert!(config.model_config(Some(3), 10, 2).graph_token);
        assert!(!TrainConfig::default().model_config(Some(3), 10, 2).graph_token);
        for mode in ["sparse", "interleaved"] {
            let text = format!("[model]\ngraph_token = true\n[attention]\nmode = \"{mode}\"\n");
            let config = TrainConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
            config.validate().unwrap_or_else(|e| panic!("{mode}: {e}"));
        }
        for refused in [
            "[mesh]\ncp = 2\n",
            "[mesh]\npp = 2\n[attention]\nmode = \"sparse\"\n",
            "[mesh]\ndp = 2\n[attention]\nmode = \"interleaved\"\n",
            "[data]\nmax_distance = 254\n",
        ] {
            let text = format!("[model]\ngraph_token = true\n{refused}");
            assert_refused(&text, "model.graph_token");
        }
    }

    #[test]
    fn the_edge_encoding_is_refused_with_ulysses_sparse_attention_and_without_hops() {
        let config = TrainConfig::from_toml_str("[model]\nedge_encoding = true\ngraph_token = true\n")
            .unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        assert!(!TrainConfig::default().model.edge_encoding);
        // a pipeline, data parallelism and the ring carry it (the embedding stage computes its
        // bias, each ring rank its block's rows)
        for accepted in [
            "[mesh]\npp = 2\ndp = 2\nmicro_batches = 2\n",
            "[mesh]\ncp = 2\n",
            "[mesh]\npp = 2\ncp = 2\nmicro_batches = 2\ncp_mode = \"ring\"\n",
            "[mesh]\ncp = 1\ncp_mode = \"ulysses\"\n",
        ] {
            TrainConfig::from_toml_str(&format!("[model]\nedge_encoding = true\n{accepted}"))
                .unwrap_or_else(|e| panic!("{e}"))
                .validate()
                .unwrap_or_else(|e| panic!("{accepted}: {e}"));
        }
        // Ulysses would send the bias through its all-to-all: refused, naming the mode
        assert_refused("[model]\nedge_encoding = true\n[mesh]\ncp = 2\ncp_mode = \"ulysses\"\n", "mesh.cp_mode");
        for refused in ["[attention]\nmode = \"sparse\"\n", "[data]\nmax_distance = 0\n"] {
            let text = format!("[model]\nedge_encoding = true\n{refused}");
            assert_refused(&text, "model.edge_encoding");
        }
    }

    #[test]
    fn random_splits_read_from_toml_with_their_defaults_and_refuse_a_split_folder_beside_them() {
        let config = TrainConfig::from_toml_str("[data.class_split]\nper_class = 10\nseed = 123\n")
            .unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        let class_split = config.data.class_split.expect("the table sets it");
        assert_eq!((class_split.per_class, class_split.valid, class_split.test), (10, 500, 1000));
        assert_eq!((class_split.seed_for(7), ClassSplitConfig::default().seed_for(7)), (123, 7));
        assert_eq!(TrainConfig::default().data.class_split, None);
        assert_refused("[data]\nsplit = \"public\"\n[data.class_split]\n", "data.class_split");
        assert_refused("[data.class_split]\nper_class = 0\n", "data.class_split.per_class");
        assert!(TrainConfig::from_toml_str("[data.class_split]\nvalidation = 5\n").is_err());
        let config = TrainConfig::from_toml_str("[data.ratio_split]\ntrain = 0.5\n").unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        let ratio_split = config.data.ratio_split.expect("the table sets it");
        assert_eq!((ratio_split.train, ratio_split.valid, ratio_split.seed), (0.5, 0.2, None));
        assert_refused("[data.ratio_split]\ntrain = 0.0\n", "data.ratio_split.train");
        assert_refused("[data.ratio_split]\ntrain = 0.9\n", "data.ratio_split.valid");
        assert_refused("[data]\nsplit = \"public\"\n[data.ratio_split]\n", "data.ratio_split");
        assert_refused("[data.class_split]\n[data.ratio_split]\n", "data.class_split");
    }

    #[test]
    fn the_ensemble_epochs_read_from_toml() {
        let config = TrainConfig::from_toml_str("[training]\nensemble_epochs = 5\n").unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.training.ensemble_epochs, 5);
        assert_eq!(TrainConfig::default().training.ensemble_epochs, 0);
        // one epoch is the best epoch alone: nothing to refuse beside Correct & Smooth
        let one = TrainConfig::from_toml_str("[training]\nensemble_epochs = 1\ncorrect_smooth = true\n").unwrap_or_else(|e| panic!("{e}"));
        one.validate().unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_final_norm_and_the_l2_penalties_read_from_toml() {
        let text = "[model]\nfinal_norm = false\n[optimizer]\ninput_l2 = 0.1\nlayer_l2 = 0.2\nclassifier_l2 = 0.3\n";
        let config = TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        let optimizer = &config.optimizer;
        assert_eq!((optimizer.input_l2, optimizer.layer_l2, optimizer.classifier_l2), (0.1, 0.2, 0.3));
        assert!(!config.model_config(Some(3), 10, 2).final_norm);
        let default = TrainConfig::default();
        assert!(default.model.final_norm && default.model_config(Some(3), 10, 2).final_norm);
        assert_eq!((default.optimizer.layer_l2, default.optimizer.classifier_l2), (0.0, 0.0));
    }

    #[test]
    fn propagation_and_consistency_read_from_toml_and_bad_values_name_their_field() {
        let text = "[model]\npropagation_steps = 10\npropagation_alpha = 0.2\ninput_propagation_steps = 3\n[training]\nconsistency_weight = 1.0\nconsistency_samples = 3\nconsistency_temperature = 0.4\n";
        let config = TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((config.model.propagation_steps, config.model.propagation_alpha), (Some(10), 0.2));
        assert_eq!(config.model.input_propagation_steps, 3);
        assert_eq!(TrainConfig::default().model.input_propagation_steps, 0);
        let training = &config.training;
        assert_eq!(
            (training.consistency_weight, training.consistency_samples, training.consistency_temperature),
            (Some(1.0), 3, 0.4)
        );
        for (refused, field) in [
            ("[model]\npropagation_alpha = 0.0\n", "model.propagation_alpha"),
            ("[model]\npropagation_alpha = 1.5\n", "model.propagation_alpha"),
            ("[model]\npropagation_edge_dropout = 1.0\n", "model.propagation_edge_dropout"),
            ("[model]\npropagation_edge_dropout = -0.1\n", "model.propagation_edge_dropout"),
            ("[model]\npropagation_steps = 2\n[mesh]\ndp = 2\n", "model.propagation_steps"),
            ("[model]\ninput_propagation_steps = 2\n[mesh]\npp = 2\n", "model.input_propagation_steps"),
            ("[training]\nconsistency_weight = -1.0\n", "training.consistency_weight"),
            ("[training]\nconsistency_samples = 1\n", "training.consistency_samples"),
            ("[training]\nconsistency_temperature = 0.0\n", "training.consistency_temperature"),
            ("[training]\nconsistency_weight = 1.0\n[mesh]\ncp = 2\n", "training.consistency_weight"),
            ("[model]\nlabel_input = true\n[mesh]\ndp = 2\n", "model.label_input"),
            ("[training]\nlabel_input_rate = 0.0\n", "training.label_input_rate"),
            ("[training]\nlabel_input_rate = 1.0\n", "training.label_input_rate"),
            ("[optimizer]\ninput_l2 = -1.0\n", "optimizer.input_l2"),
            ("[optimizer]\ninput_l2 = 0.001\n[mesh]\npp = 2\n", "optimizer.input_l2"),
            ("[optimizer]\nlayer_l2 = -1.0\n", "optimizer.layer_l2"),
            ("[optimizer]\nlayer_l2 = 0.001\n[mesh]\ndp = 2\n", "optimizer.layer_l2"),
            ("[optimizer]\nclassifier_l2 = inf\n", "optimizer.classifier_l2"),
            ("[optimizer]\nclassifier_l2 = 0.001\n[mesh]\ncp = 2\n", "optimizer.classifier_l2"),
            ("[model]\nfinal_norm = false\n[mesh]\npp = 2\n", "model.final_norm"),
            ("[training]\nself_training_threshold = 1.0\n", "training.self_training_threshold"),
            ("[training]\nself_training_threshold = 0.0\n", "training.self_training_threshold"),
            ("[training]\nself_training_rounds = 1\n[mesh]\ndp = 2\n", "training.self_training_rounds"),
            ("[training]\nself_training_rounds = 1\ncheckpoint_dir = \"ckpt\"\n", "training.self_training_rounds"),
            ("[training]\nensemble_epochs = 3\ncorrect_smooth = true\n", "training.ensemble_epochs"),
            ("[training]\nensemble_epochs = 3\ncheckpoint_dir = \"ckpt\"\n", "training.ensemble_epochs"),
            ("[training]\nself_training_rounds = 1\n[model]\nlabel_input = true\n", "training.self_training_rounds"),
        ] {
            assert_refused(refused, field);
        }
    }

    #[test]
    fn unset_recipe_fields_follow_the_run() {
        let scarce = RunContext { parallel: false, train_fraction: 0.05 };
        let plenty = RunContext { parallel: false, train_fraction: 0.6 };
        let mesh = RunContext { parallel: true, train_fraction: 0.05 };
        assert!(scarce.scarce_labels() && !plenty.scarce_labels() && !mesh.scarce_labels());
        let unset = TrainConfig::default();
        let recipe = |config: &TrainConfig, run| {
            (
                config.propagation_steps(run),
                config.consistency_weight(run),
                config.feature_hops(run),
                config.key_dropout(run),
                config.layer_scale(run),
                config.lr(run),
                config.input_dropout(run),
            )
        };
        assert_eq!(
            recipe(&unset, scarce),
            (DEFAULT_PROPAGATION_STEPS, DEFAULT_CONSISTENCY_WEIGHT, 0, 0.7, Some(DEFAULT_LAYER_SCALE), 0.0005, 0.8)
        );
        for run in [plenty, mesh, RunContext::STANDARD] {
            assert_eq!(recipe(&unset, run), (0, 0.0, 2, 0.2, None, 0.002, 0.3), "{run:?}");
        }
        // resolving sets every field to its value for the run
        let resolved = unset.resolved(scarce);
        assert_eq!(recipe(&resolved, mesh), recipe(&unset, scarce));
        // a mesh with neither set runs without them instead of refusing
        let on_mesh = TrainConfig::from_toml_str("[mesh]\ndp = 2\n").unwrap_or_else(|e| panic!("{e}"));
        on_mesh.validate().unwrap_or_else(|e| panic!("{e}"));
        // set values hold for every run: 0 turns them off, and a mesh takes 0
        let text = "[model]\npropagation_steps = 0\nlayer_scale = 0.0\n[training]\nconsistency_weight = 0.0\n[mesh]\ncp = 2\n";
        let off = TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
        off.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (off.propagation_steps(scarce), off.consistency_weight(scarce), off.feature_hops(scarce), off.layer_scale(scarce)),
            (0, 0.0, 2, None)
        );
        let text = "[data]\nfeature_hops = 1\n[model]\npropagation_steps = 3\nkey_dropout = 0.1\nlayer_scale = 0.5\ninput_dropout = 0.4\n[optimizer]\nlr = 0.01\n[training]\nconsistency_weight = 0.5\n";
        let set = TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
        for run in [scarce, plenty] {
            assert_eq!(recipe(&set, run), (3, 0.5, 1, 0.1, Some(0.5), 0.01, 0.4), "{run:?}");
        }
        for (refused, field) in [
            ("[model]\nkey_dropout = 1.0\n", "model.key_dropout"),
            ("[model]\ninput_dropout = 1.0\n", "model.input_dropout"),
            ("[optimizer]\nlr = 0.0\n", "optimizer.lr"),
        ] {
            assert_refused(refused, field);
        }
    }

    #[test]
    fn label_smoothing_and_ppr_read_from_toml_and_bad_values_name_their_field() {
        let text = "[data]\nfeature_propagation = \"ppr\"\nppr_alpha = 0.2\n[training]\nlabel_smoothing = 0.1\n";
        let config = TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.data.feature_propagation, FeaturePropagation::Ppr);
        assert_eq!((config.data.ppr_alpha, config.training.label_smoothing), (0.2, 0.1));
        assert_eq!(TrainConfig::default().data.feature_propagation, FeaturePropagation::Concat);
        for (refused, field) in [
            ("[training]\nlabel_smoothing = 1.0\n", "training.label_smoothing"),
            ("[training]\nlabel_smoothing = -0.1\n", "training.label_smoothing"),
            ("[data]\nppr_alpha = 0.0\n", "data.ppr_alpha"),
            ("[data]\nppr_alpha = 1.5\n", "data.ppr_alpha"),
        ] {
            assert_refused(refused, field);
        }
        let unknown = TrainConfig::from_toml_str("[data]\nfeature_propagation = \"sum\"\n");
        assert!(unknown.is_err_and(|e| e.contains("line 2")), "an unknown mode names its line");
    }

    #[test]
    fn correct_and_smooth_reads_from_toml_and_bad_values_name_their_field() {
        let text = "[training]\ncorrect_smooth = true\ncorrect_alpha = 1.0\nsmooth_alpha = 0.5\n\
                    correct_smooth_steps = 10\ncorrect_scale = 2.0\n";
        let config = TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{e}"));
        config.validate().unwrap_or_else(|e| panic!("{e}"));
        let cs = crate::CorrectAndSmooth::from_config(&config.training);
        assert_eq!(
            cs,
            Some(crate::CorrectAndSmooth { correct_alpha: 1.0, smooth_alpha: 0.5, steps: 10, scale: Some(2.0) })
        );
        assert_eq!(crate::CorrectAndSmooth::from_config(&TrainConfig::default().training), None);
        for (refused, field) in [
            ("correct_alpha = 1.1", "training.correct_alpha"),
            ("correct_alpha = -0.1", "training.correct_alpha"),
            ("correct_alpha = nan", "training.correct_alpha"),
            ("smooth_alpha = 1.5", "training.smooth_alpha"),
            ("smooth_alpha = -1.0", "training.smooth_alpha"),
            ("correct_smooth_steps = 0", "training.correct_smooth_steps"),
            ("correct_scale = 0.0", "training.correct_scale"),
            ("correct_scale = -1.0", "training.correct_scale"),
            ("correct_scale = inf", "training.correct_scale"),
        ] {
            let text = format!("[training]\ncorrect_smooth = true\n{refused}\n");
            assert_refused(&text, field);
        }
        // the bounds are inclusive
        let text = "[training]\ncorrect_alpha = 0.0\nsmooth_alpha = 1.0\ncorrect_smooth_steps = 1\n";
        TrainConfig::from_toml_str(text).unwrap_or_else(|e| panic!("{e}")).validate().unwrap_or_else(|e| panic!("{e}"));
    }
}
