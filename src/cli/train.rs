use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use megagraph_parallel::{ContextParallelBackend, CpMode, MemoryMeter, NodeConfig};

use super::backend::{BackendChoice, BackendJob};
use super::ModelShapeArgs;
use super::train_progress::{EpochProgress, PrepareBars};
use megagraph_graph::SequenceStrategy;
use megagraph_train::{AttentionMode, DistanceKind, FeaturePropagation, MeshPlan, ReformSetting, TrainConfig};
use megagraph_train::write_training_curves;
use super::error::{CliError, Result};
use megagraph_train::{NodeClassificationTrainer, TrainReport};

/// Options of `megagraph train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Config file (TOML); see configs/train/ for examples. Flags override it.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Dataset directory in the OGB node-property raw layout (raw/edge.csv.gz, ...).
    #[arg(long, value_name = "DIR", conflicts_with = "synthetic")]
    pub dataset: Option<PathBuf>,
    /// Train on the built-in synthetic graph (the default when no dataset is given).
    #[arg(long)]
    pub synthetic: bool,
    /// Split scheme folder under split/ (default: the only or first one).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["class_split", "ratio_split"])]
    pub split: Option<String>,
    /// Replace the dataset's split with a class-balanced random one: N training nodes from
    /// every class, then 500 validation and 1000 test nodes (or the sizes of the config's
    /// [data.class_split]) from the rest, drawn with the run's seed (see --split-seed)
    #[arg(long, value_name = "N", conflicts_with = "ratio_split")]
    pub class_split: Option<usize>,
    /// Replace the dataset's split with a random one by shares of the labelled nodes: TRAIN
    /// and VALID for training and validation (e.g. 0.6,0.2), the rest for test, drawn with the
    /// run's seed (see --split-seed)
    #[arg(long, value_name = "TRAIN,VALID", value_parser = parse_shares)]
    pub ratio_split: Option<(f64, f64)>,
    /// Seed of a --class-split or --ratio-split draw, or of the config's (default: the run's
    /// --seed, so each seed of `eval` draws its own split)
    #[arg(long, value_name = "N")]
    pub split_seed: Option<u64>,
    /// Seed of everything random.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Maximum number of epochs.
    #[arg(long, value_name = "N")]
    pub epochs: Option<usize>,
    /// Stop after this many epochs without a better validation accuracy (0 = never).
    #[arg(long, value_name = "N")]
    pub patience: Option<usize>,
    /// Stop after N optimizer steps in total (across epochs); the run then ends normally.
    #[arg(long, value_name = "N")]
    pub max_steps: Option<usize>,
    /// Sequences per optimizer step.
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Nodes per sequence.
    #[arg(long, value_name = "S")]
    pub seq_len: Option<usize>,
    /// How nodes are grouped into sequences.
    #[arg(long, value_parser = sequence_strategy())]
    pub sequences: Option<SequenceStrategy>,
    /// Largest exact shortest-path distance (farther pairs share one bucket).
    #[arg(long, value_name = "K")]
    pub max_distance: Option<u8>,
    /// Cap on the adjacency entries one BFS source examines when building distance indexes
    /// (0 = exact; see the config's `max_bfs_arcs`)
    #[arg(long, value_name = "N")]
    pub max_bfs_arcs: Option<usize>,
    /// Batches whose distance rows a background thread builds ahead (0 = none; default: 2 on
    /// `--backend wgpu|cuda`, 0 on the CPU)
    #[arg(long, value_name = "N")]
    pub prefetch_batches: Option<usize>,
    /// Measure distances in the whole graph or in each sequence's induced subgraph.
    #[arg(long, value_enum)]
    pub distance_scope: Option<ScopeArg>,
    /// Rounds of GCN-normalized feature propagation appended to the node features (0 = none;
    /// unset: 0 where the logits are propagated, 2 elsewhere).
    #[arg(long, value_name = "K")]
    pub feature_hops: Option<usize>,
    /// How the propagated rounds become node inputs: `concat` ([X, ÂX, …, Â^K X]) or `ppr`
    /// (APPNP: [X, Z^K], Z^{t+1} = (1 − α) Â Z^t + α X, K = --feature-hops).
    #[arg(long, value_enum, value_name = "MODE")]
    pub feature_propagation: Option<PropagationArg>,
    /// APPNP's teleport probability α of --feature-propagation ppr.
    #[arg(long, value_name = "A")]
    pub ppr_alpha: Option<f64>,
    /// Probability of moving a node pair of a training batch to the "farther" distance bucket.
    #[arg(long, value_name = "P")]
    pub structure_dropout: Option<f64>,
    /// The preset, layer count and widths (override the preset).
    #[command(flatten)]
    pub shape: ModelShapeArgs,
    /// Dropout in the layers.
    #[arg(long, value_name = "P")]
    pub dropout: Option<f64>,
    /// Dropout on the raw input features (unset: 0.8 where labels are scarce, 0.3 elsewhere).
    #[arg(long, value_name = "P")]
    pub input_dropout: Option<f64>,
    /// DropNode: probability of zeroing a node's whole encoded input while training (default 0).
    #[arg(long, value_name = "P")]
    pub node_dropout: Option<f64>,
    /// Attention key dropout: probability of hiding a key node from all queries of a layer
    /// (unset: 0.7 where labels are scarce, 0.2 elsewhere).
    #[arg(long, value_name = "P")]
    pub key_dropout: Option<f64>,
    /// LayerScale: every layer's attention and feed-forward outputs are multiplied by a learned
    /// per-channel scale that starts at this value; 0 turns it off (unset: 0.1 where labels are
    /// scarce, off elsewhere).
    #[arg(long, value_name = "S")]
    pub layer_scale: Option<f64>,
    /// Graphormer's graph token: one learned position per sequence joined to every node, with
    /// its own learned spatial bias (one device; sparse and interleaved attention join it to
    /// every node through sparse attention's global token).
    #[arg(long)]
    pub graph_token: bool,
    /// Graphormer's edge encoding: the mean over one shortest path of the edge features,
    /// projected per hop and head, added to the logits (needs edge features and full attention;
    /// with --cp above 1 the ring only).
    #[arg(long)]
    pub edge_encoding: bool,
    /// UniMP's label input: a learned embedding of each node's class, shown for a random part
    /// (--label-input-rate) of a step's training nodes, the loss taken on the others;
    /// evaluation shows every training node's label (one device).
    #[arg(long)]
    pub label_input: bool,
    /// No layer norm before the classifier: the logits then scale with the weights, so that
    /// --layer-l2 and --classifier-l2 bound them (one device).
    #[arg(long)]
    pub no_final_norm: bool,
    /// APPNP's predict-then-propagate head: K rounds of Z ← (1 − α) Â Z + α H over the logits
    /// H, the loss taken on Z (0 = off; unset: 10 where labels are scarce, that is on one device
    /// with a training split under 10% of the nodes, off elsewhere; one device only).
    #[arg(long, value_name = "K")]
    pub propagation_steps: Option<usize>,
    /// Teleport probability α of --propagation-steps, in (0, 1] (0.1).
    #[arg(long, value_name = "A")]
    pub propagation_alpha: Option<f64>,
    /// APPNP's dropout on the adjacency matrix: each training round of --propagation-steps drops
    /// every entry of Â with probability P, in [0, 1) (0).
    #[arg(long, value_name = "P")]
    pub propagation_edge_dropout: Option<f64>,
    /// GRAND's random propagation: the encoded rows (after DropNode, --node-dropout) averaged
    /// over 0..=K hops before the layers; meant for whole-graph sequences; 0 turns it off
    /// (overrides model.input_propagation_steps).
    #[arg(long, value_name = "K")]
    pub input_propagation_steps: Option<usize>,
    /// Peak learning rate (unset: 0.0005 where labels are scarce, 0.002 elsewhere).
    #[arg(long, value_name = "LR")]
    pub lr: Option<f64>,
    /// AdamW weight decay.
    #[arg(long, value_name = "W")]
    pub weight_decay: Option<f64>,
    /// L2 penalty λ of the input projection: λ/2 ‖W‖² added to the loss, Adam's coupled weight
    /// decay of GCN and APPNP (0 = off; one device).
    #[arg(long, value_name = "L")]
    pub input_l2: Option<f64>,
    /// L2 penalty λ of the layers' weight matrices (attention and FFN): λ/2 Σ ‖W‖² added to the
    /// loss (0 = off; one device).
    #[arg(long, value_name = "L")]
    pub layer_l2: Option<f64>,
    /// L2 penalty λ of the classifier's weight matrix: λ/2 ‖W‖² added to the loss (0 = off; one
    /// device).
    #[arg(long, value_name = "L")]
    pub classifier_l2: Option<f64>,
    /// Label smoothing of the cross-entropy: targets 1 − E on the label plus E / classes.
    #[arg(long, value_name = "E")]
    pub label_smoothing: Option<f64>,
    /// Weight λ of GRAND's consistency regularization: each step runs the model
    /// --consistency-samples times under dropout and pulls every node's predictions towards
    /// their sharpened mean (0 = off; unset: 1 where labels are scarce, off elsewhere; one device
    /// only).
    #[arg(long, value_name = "L")]
    pub consistency_weight: Option<f64>,
    /// Forward passes per step of the consistency regularization (2).
    #[arg(long, value_name = "S")]
    pub consistency_samples: Option<usize>,
    /// Sharpening temperature of the consistency regularization, in (0, 1] (0.5).
    #[arg(long, value_name = "T")]
    pub consistency_temperature: Option<f64>,
    /// With --label-input: the probability that a training node shows its label in a step, in
    /// (0, 1) (0.5).
    #[arg(long, value_name = "R")]
    pub label_input_rate: Option<f64>,
    /// Rounds of self-training after the first run: each trains a fresh model with the previous
    /// best model's confident predictions on the nodes outside the training and validation
    /// splits as extra labels; the round with the best validation accuracy is kept (0 = off).
    #[arg(long, value_name = "N")]
    pub self_training_rounds: Option<usize>,
    /// Probability a prediction needs to become a self-training pseudo-label, in (0, 1) (0.9).
    #[arg(long, value_name = "P")]
    pub self_training_threshold: Option<f64>,
    /// Snapshot ensemble: the run's validation and test accuracy are those of the mean softmax
    /// predictions of the K epochs with the best validation accuracy, not of the best epoch
    /// alone (0 or 1 = off; not with --correct-smooth or --checkpoint-dir).
    #[arg(long, value_name = "K")]
    pub ensemble_epochs: Option<usize>,
    /// Correct & Smooth (Huang et al. 2021) of the softmax predictions at every evaluation, from
    /// the training labels only: validation (best epoch, early stopping) and test accuracy are
    /// those of the post-processed predictions.
    #[arg(long)]
    pub correct_smooth: bool,
    /// Correct & Smooth's α₁: E ← (1 − α₁) E⁰ + α₁ Â E spreads the training error (0.8).
    #[arg(long, value_name = "A")]
    pub correct_alpha: Option<f64>,
    /// Correct & Smooth's α₂: G ← (1 − α₂) G⁰ + α₂ Â G spreads the corrected predictions (0.8).
    #[arg(long, value_name = "A")]
    pub smooth_alpha: Option<f64>,
    /// Rounds K of each of Correct & Smooth's two propagations (50).
    #[arg(long, value_name = "K")]
    pub correct_smooth_steps: Option<usize>,
    /// Fixed scale of Correct & Smooth's correction (unset: autoscale).
    #[arg(long, value_name = "S")]
    pub correct_scale: Option<f64>,
    /// Write metrics (accuracy, time, memory, per-epoch history) as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub metrics_out: Option<PathBuf>,
    /// Write a checkpoint after every epoch into this directory.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Write SVG training curves into this directory: loss.svg (training and validation loss
    /// per epoch) and accuracy.svg (train, valid and test accuracy per epoch).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Continue from the last checkpoint in --checkpoint-dir (or the config's
    /// `checkpoint_dir`).
    #[arg(long)]
    pub resume: bool,
    /// Attention core of the training steps: full biased attention, or TorchGT's sparse edge
    /// attention or dual-interleaved attention (sparse and interleaved run on one device).
    #[arg(long, value_enum, value_name = "MODE", help_heading = "Attention (TorchGT's modes)")]
    pub attention: Option<AttentionArg>,
    /// Interleaved attention: steps of full attention per epoch, evenly spaced (default 5).
    #[arg(long, value_name = "F", help_heading = "Attention (TorchGT's modes)")]
    pub switch_freq: Option<usize>,
    /// Reorder each sequence cluster by cluster (TorchGT's cluster-aware reordering, 8
    /// clusters).
    #[arg(long, help_heading = "Attention (TorchGT's modes)")]
    pub reorder: bool,
    /// Elastic computation reformation of the sparse steps' edges into dense 16x16 tiles (needs
    /// --reorder and sparse or interleaved attention).
    #[arg(long, help_heading = "Attention (TorchGT's modes)")]
    pub block_reform: bool,
    /// Which cluster pairs --block-reform reforms: `all` (default: TorchGT's released code,
    /// p = 1), `tuned` (the paper's p = beta*E/N^2, beta tuned per epoch) or a fixed beta.
    #[arg(long, value_name = "all|tuned|BETA", requires = "block_reform", help_heading = "Attention (TorchGT's modes)")]
    pub reform_threshold: Option<ReformSetting>,
    /// Pipeline-parallel stages (worker threads; see the `[mesh]` config section).
    #[arg(long, value_name = "P", help_heading = "Parallel layout")]
    pub pp: Option<usize>,
    /// Context-parallel blocks per sequence.
    #[arg(long, value_name = "C", help_heading = "Parallel layout")]
    pub cp: Option<usize>,
    /// How the --cp ranks attend over the whole sequence: the graph-aware ring, or Ulysses
    /// (all-to-alls over the heads; the head count must be a multiple of --cp). Default: the
    /// plan's mode with --plan, ring otherwise; given, it overrides the plan's.
    #[arg(long, value_enum, value_name = "MODE", help_heading = "Parallel layout")]
    pub cp_mode: Option<CpModeArg>,
    /// Data-parallel replicas (must divide --batch-size).
    #[arg(long, value_name = "D", help_heading = "Parallel layout")]
    pub dp: Option<usize>,
    /// Pipeline micro-batches per step and replica.
    #[arg(long, value_name = "M", help_heading = "Parallel layout")]
    pub micro_batches: Option<usize>,
    /// Layers of each pipeline stage, comma-separated (e.g. 6,10); default: as even as possible.
    #[arg(
        long,
        value_name = "L0,L1,...",
        value_delimiter = ',',
        help_heading = "Parallel layout"
    )]
    pub stage_layers: Option<Vec<usize>>,
    /// Run the layout of a plan: a `megagraph plan --json` file, or `auto` to plan for this
    /// machine (or --cluster) now. Replaces --pp/--cp/--dp/--micro-batches/--stage-layers.
    #[arg(long, value_name = "FILE|auto", help_heading = "Parallel layout",
          conflicts_with_all = ["pp", "cp", "dp", "micro_batches", "stage_layers"])]
    pub plan: Option<MeshPlan>,
    /// Cluster description for `--plan auto` (default: this machine, its CPU cores as workers
    /// sharing its memory).
    #[arg(
        long,
        value_name = "FILE.toml",
        requires = "plan",
        help_heading = "Parallel layout"
    )]
    pub cluster: Option<PathBuf>,
    /// Backend to train on: flex (CPU), or wgpu / cuda in builds with that feature.
    #[arg(
        long,
        value_enum,
        value_name = "NAME",
        default_value = "flex",
        help_heading = "Parallel layout"
    )]
    pub backend: BackendChoice,
    /// GPUs to use (cuda, wgpu): 1 puts every rank of a mesh on the first GPU; otherwise rank
    /// r runs on GPU r, and the mesh must have this many ranks.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Parallel layout"
    )]
    pub devices: usize,
    /// Multi-node data parallelism (this process is one node).
    #[command(flatten, next_help_heading = "Several machines")]
    pub nodes: super::NodeArgs,
    /// Directory of the parsed-dataset cache (default: $MEGAGRAPH_CACHE or ~/.cache/megagraph).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Neither read nor write the parsed-dataset cache.
    #[arg(long)]
    pub no_cache: bool,
}

/// `--ratio-split` values: two shares `TRAIN,VALID`, e.g. `0.6,0.2`.
fn parse_shares(text: &str) -> std::result::Result<(f64, f64), String> {
    let shares = text
        .split(',')
        .map(|share| share.trim().parse::<f64>().map_err(|err| format!("{share:?}: {err}")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    match shares[..] {
        [train, valid] => Ok((train, valid)),
        _ => Err(format!("expected two shares TRAIN,VALID (e.g. 0.6,0.2), got {text:?}")),
    }
}

/// `--sequences` values: each [`SequenceStrategy`] by its config-file name.
fn sequence_strategy() -> impl clap::builder::TypedValueParser<Value = SequenceStrategy> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new([
        PossibleValue::new("locality").help("Nodes close in the graph share a sequence (graph partitioning)"),
        PossibleValue::new("random").help("Random groups"),
    ])
    .map(|name| match name.as_str() {
        "random" => SequenceStrategy::Random,
        _ => SequenceStrategy::Locality,
    })
}

/// `--cp-mode` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum CpModeArg {
    /// Key/value blocks travel a ring; each rank holds its rows of the distance index.
    Ring,
    /// Two all-to-alls per attention scatter the heads and gather the sequence.
    Ulysses,
}

/// `--attention` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum AttentionArg {
    /// Every query over every key, with the spatial bias (megagraph's model).
    Full,
    /// TorchGT's sparse edge attention over each sequence's edges and self-loops.
    Sparse,
    /// Full attention on --switch-freq evenly spaced steps per epoch, sparse on the others.
    Interleaved,
}

/// `--feature-propagation` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PropagationArg {
    /// [X, ÂX, …, Â^K X] side by side.
    Concat,
    /// APPNP's personalized-PageRank propagation: [X, Z^K].
    Ppr,
}

/// `--distance-scope` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ScopeArg {
    /// Shortest paths in the whole graph.
    Graph,
    /// Shortest paths inside the sequence's induced subgraph.
    Induced,
}

impl TrainArgs {
    /// The configuration: defaults, then the config file, then the flags.
    pub fn to_config(&self) -> Result<TrainConfig> {
        let mut c = match &self.config {
            Some(path) => TrainConfig::from_toml_file(path)?,
            None => TrainConfig::default(),
        };
        fn set<T: Clone>(slot: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *slot = v.clone();
            }
        }
        // an optional field: the flag, when given, replaces it (unset stays unset)
        fn set_some<T: Clone>(slot: &mut Option<T>, value: &Option<T>) {
            if value.is_some() {
                slot.clone_from(value);
            }
        }
        set_some(&mut c.data.dataset, &self.dataset);
        if self.synthetic {
            c.data.dataset = None;
        }
        // a split flag replaces whatever split the config names
        if self.split.is_some() {
            c.data.class_split = None;
            c.data.ratio_split = None;
        }
        set_some(&mut c.data.split, &self.split);
        if let Some(per_class) = self.class_split {
            c.data.split = None;
            c.data.ratio_split = None;
            c.data.class_split.get_or_insert_with(Default::default).per_class = per_class;
        }
        if let Some((train, valid)) = self.ratio_split {
            c.data.split = None;
            c.data.class_split = None;
            let seed = c.data.ratio_split.and_then(|ratio_split| ratio_split.seed);
            c.data.ratio_split = Some(megagraph_train::RatioSplitConfig { train, valid, seed });
        }
        if let Some(seed) = self.split_seed {
            match (&mut c.data.class_split, &mut c.data.ratio_split) {
                (Some(class_split), _) => class_split.seed = Some(seed),
                (None, Some(ratio_split)) => ratio_split.seed = Some(seed),
                (None, None) => {
                    return Err(CliError::InvalidFlag {
                        flag: "split-seed",
                        reason: "it seeds a random split: give --class-split or --ratio-split (or set one in the config)".into(),
                    });
                }
            }
        }
        set(&mut c.training.seed, &self.seed);
        set(&mut c.training.epochs, &self.epochs);
        set(&mut c.training.patience, &self.patience);
        set_some(&mut c.training.max_steps, &self.max_steps);
        set(&mut c.training.batch_size, &self.batch_size);
        set(&mut c.data.seq_len, &self.seq_len);
        set(&mut c.data.max_distance, &self.max_distance);
        set(&mut c.data.max_bfs_arcs, &self.max_bfs_arcs);
        set_some(&mut c.data.prefetch_batches, &self.prefetch_batches);
        if c.data.prefetch_batches.is_none() {
            // a GPU step leaves the CPU idle: build the next batches' rows meanwhile
            c.data.prefetch_batches = Some(if self.backend.is_cpu() { 0 } else { 2 });
        }
        set(&mut c.data.sequences, &self.sequences);
        if let Some(s) = self.distance_scope {
            c.data.distance_scope = match s {
                ScopeArg::Graph => DistanceKind::Graph,
                ScopeArg::Induced => DistanceKind::Induced,
            };
        }
        set(&mut c.data.structure_dropout, &self.structure_dropout);
        set_some(&mut c.data.feature_hops, &self.feature_hops);
        if let Some(propagation) = self.feature_propagation {
            c.data.feature_propagation = match propagation {
                PropagationArg::Concat => FeaturePropagation::Concat,
                PropagationArg::Ppr => FeaturePropagation::Ppr,
            };
        }
        set(&mut c.data.ppr_alpha, &self.ppr_alpha);
        self.shape.apply(&mut c.model);
        set(&mut c.model.dropout, &self.dropout);
        set_some(&mut c.model.input_dropout, &self.input_dropout);
        set(&mut c.model.node_dropout, &self.node_dropout);
        set_some(&mut c.model.key_dropout, &self.key_dropout);
        set_some(&mut c.model.layer_scale, &self.layer_scale);
        c.model.graph_token |= self.graph_token;
        c.model.edge_encoding |= self.edge_encoding;
        c.model.label_input |= self.label_input;
        c.model.final_norm &= !self.no_final_norm;
        set_some(&mut c.model.propagation_steps, &self.propagation_steps);
        set(&mut c.model.propagation_alpha, &self.propagation_alpha);
        set(&mut c.model.propagation_edge_dropout, &self.propagation_edge_dropout);
        set(&mut c.model.input_propagation_steps, &self.input_propagation_steps);
        set_some(&mut c.optimizer.lr, &self.lr);
        set(&mut c.optimizer.weight_decay, &self.weight_decay);
        set(&mut c.optimizer.input_l2, &self.input_l2);
        set(&mut c.optimizer.layer_l2, &self.layer_l2);
        set(&mut c.optimizer.classifier_l2, &self.classifier_l2);
        set(&mut c.training.label_smoothing, &self.label_smoothing);
        set_some(&mut c.training.consistency_weight, &self.consistency_weight);
        set(&mut c.training.consistency_samples, &self.consistency_samples);
        set(&mut c.training.consistency_temperature, &self.consistency_temperature);
        set(&mut c.training.label_input_rate, &self.label_input_rate);
        set(&mut c.training.self_training_rounds, &self.self_training_rounds);
        set(&mut c.training.self_training_threshold, &self.self_training_threshold);
        set(&mut c.training.ensemble_epochs, &self.ensemble_epochs);
        c.training.correct_smooth |= self.correct_smooth;
        set(&mut c.training.correct_alpha, &self.correct_alpha);
        set(&mut c.training.smooth_alpha, &self.smooth_alpha);
        set(&mut c.training.correct_smooth_steps, &self.correct_smooth_steps);
        set_some(&mut c.training.correct_scale, &self.correct_scale);
        set_some(&mut c.training.metrics_out, &self.metrics_out);
        set_some(&mut c.training.checkpoint_dir, &self.checkpoint_dir);
        c.training.resume |= self.resume;
        set_some(&mut c.training.plot_dir, &self.plot);
        set_some(&mut c.data.cache_dir, &self.cache_dir);
        c.data.no_cache |= self.no_cache;
        if let Some(mode) = self.attention {
            c.attention.mode = match mode {
                AttentionArg::Full => AttentionMode::Full,
                AttentionArg::Sparse => AttentionMode::Sparse,
                AttentionArg::Interleaved => AttentionMode::Interleaved,
            };
        }
        set(&mut c.attention.switch_freq, &self.switch_freq);
        c.attention.reorder |= self.reorder;
        c.attention.block_reform |= self.block_reform;
        set(&mut c.attention.reform_threshold, &self.reform_threshold);
        set(&mut c.mesh.pp, &self.pp);
        set(&mut c.mesh.cp, &self.cp);
        set(&mut c.mesh.dp, &self.dp);
        if let Some(mode) = self.cp_mode {
            c.mesh.cp_mode = Some(match mode {
                CpModeArg::Ring => CpMode::Ring,
                CpModeArg::Ulysses => CpMode::Ulysses,
            });
        }
        set(&mut c.mesh.micro_batches, &self.micro_batches);
        set_some(&mut c.mesh.stage_layers, &self.stage_layers);
        set_some(&mut c.mesh.plan, &self.plan);
        set_some(&mut c.mesh.cluster, &self.cluster);
        c.validate()?;
        Ok(c)
    }
}

/// `megagraph train`: prepares the data, trains on the CPU (one device, or a mesh of worker
/// threads) and prints the result.
///
/// With `nodes`, this process is one node of a multi-node run; only node 0 writes the metrics,
/// plots and checkpoints.
pub fn train(
    config: &TrainConfig,
    nodes: Option<NodeConfig>,
    backend: BackendChoice,
    devices: usize,
) -> Result<()> {
    backend.check()?;
    let mut config = config.clone();
    if nodes.is_some() && config.data.feature_hops.is_none() {
        // several nodes run the mesh engine: the hop features of a parallel run
        config.data.feature_hops = Some(config.feature_hops(megagraph_train::RunContext::STANDARD));
    }
    let config = &config;
    let data = megagraph_train::prepare_with_progress(config, &PrepareBars::default())?;
    println!("dataset {}", data.summary());
    let mut trainer = NodeClassificationTrainer::new(config, data);
    if let Some(nodes) = nodes {
        println!("node {} of {}", nodes.node_rank, nodes.num_nodes);
        trainer = trainer.with_nodes(nodes);
    }
    if let Some(layout) = trainer.layout()? {
        println!(
            "mesh: pp={} cp={} dp={} ({} workers), {} micro-batches, stage layers {:?}, cp_mode {}",
            layout.pp,
            layout.cp,
            layout.dp,
            layout.world_size(),
            layout.micro_batches,
            layout.stage_layers,
            layout.cp_mode
        );
    }
    let outcome = backend.run_on(devices, FitJob { trainer: &trainer })?;
    let r = &outcome;
    println!(
        "{}: best epoch {} of {}, valid accuracy {:.4}, test accuracy {:.4} ({:.2} s/epoch, {} parameters)",
        r.stopped,
        r.best_epoch,
        r.epochs_run,
        r.best_valid_accuracy,
        r.test_accuracy,
        r.seconds_per_epoch,
        r.params
    );
    if let Some(ensemble) = &r.ensemble {
        println!(
            "  (the accuracies above are those of the snapshot ensemble of epochs {:?})",
            ensemble.epochs
        );
    }
    if let Some(path) = config
        .training
        .metrics_out
        .as_ref()
        .filter(|_| trainer.is_lead())
    {
        r.write_json(path)?;
        println!("metrics written to {}", path.display());
    }
    if let Some(dir) = config
        .training
        .plot_dir
        .as_ref()
        .filter(|_| trainer.is_lead())
    {
        for path in write_training_curves(r, dir)? {
            println!("curve written to {}", path.display());
        }
    }
    Ok(())
}

/// [`NodeClassificationTrainer::fit_on`] with the progress display, on the chosen backend.
struct FitJob<'a> {
    trainer: &'a NodeClassificationTrainer<'a>,
}

impl BackendJob for FitJob<'_> {
    type Output = TrainReport;

    fn run<B: ContextParallelBackend>(
        self,
        _backend: BackendChoice,
        devices: Vec<B::Device>,
        _meter: Arc<dyn MemoryMeter>,
    ) -> Result<TrainReport> {
        let mut progress = EpochProgress::new();
        Ok(self.trainer.fit_on::<B>(&devices, &mut progress)?.report)
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};
    use megagraph_models::ModelPreset;

    use super::*;
    use crate::cli::{Cli, Command};

    fn train_args(args: &[&str]) -> std::result::Result<TrainArgs, clap::Error> {
        let cli = Cli::try_parse_from(["megagraph", "train"].into_iter().chain(args.iter().copied()))?;
        match cli.command {
            Command::Train(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn resume_takes_the_checkpoint_directory_from_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("run.toml");
        std::fs::write(&config, "[training]\ncheckpoint_dir = \"ckpt\"\n").unwrap();
        let args = train_args(&["--config", config.to_str().unwrap(), "--resume"]).unwrap();
        let config = args.to_config().unwrap();
        assert!(config.training.resume);
        assert_eq!(config.training.checkpoint_dir, Some("ckpt".into()));
        // without a directory anywhere, the config names what is missing
        let error = train_args(&["--resume"]).unwrap().to_config().unwrap_err().to_string();
        assert!(error.contains("training.resume") && error.contains("checkpoint_dir"), "{error}");
    }

    #[test]
    fn random_split_flags_set_the_config_tables_and_refuse_a_split_folder() {
        let config = train_args(&["--class-split", "20"]).unwrap().to_config().unwrap();
        assert_eq!(config.data.class_split, Some(megagraph_train::ClassSplitConfig::default()));
        let config = train_args(&["--class-split", "5", "--split-seed", "9"]).unwrap().to_config().unwrap();
        let class_split = config.data.class_split.unwrap();
        assert_eq!((class_split.per_class, class_split.seed), (5, Some(9)));
        let config = train_args(&["--ratio-split", "0.5,0.25", "--split-seed", "3"]).unwrap().to_config().unwrap();
        let ratio_split = config.data.ratio_split.unwrap();
        assert_eq!((ratio_split.train, ratio_split.valid, ratio_split.seed), (0.5, 0.25, Some(3)));
        assert_eq!(config.data.class_split, None);
        let plain = train_args(&[]).unwrap().to_config().unwrap();
        assert_eq!((plain.data.class_split, plain.data.ratio_split), (None, None));
        assert!(train_args(&["--class-split", "20", "--split", "public"]).is_err());
        assert!(train_args(&["--class-split", "20", "--ratio-split", "0.6,0.2"]).is_err());
        assert!(train_args(&["--ratio-split", "0.6"]).is_err());
        assert!(train_args(&["--ratio-split", "0.6,x"]).is_err());
        assert!(train_args(&["--split-seed", "1"]).unwrap().to_config().is_err());
        // a flag replaces the config's split, whichever kind it is
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("folder.toml");
        std::fs::write(&folder, "[data]\nsplit = \"public\"\n").unwrap();
        let random = dir.path().join("random.toml");
        std::fs::write(&random, "[data.class_split]\nper_class = 5\nseed = 4\n").unwrap();
        let with = |config: &std::path::Path, flags: &[&str]| {
            let mut args = vec!["--config", config.to_str().unwrap()];
            args.extend_from_slice(flags);
            train_args(&args).unwrap().to_config().unwrap().data
        };
        let data = with(&folder, &["--class-split", "7"]);
        assert_eq!((data.split, data.class_split.map(|c| c.per_class)), (None, Some(7)));
        let data = with(&random, &["--split", "public"]);
        assert_eq!((data.split.as_deref(), data.class_split), (Some("public"), None));
        let data = with(&random, &["--class-split", "9"]);
        assert_eq!(data.class_split.map(|c| (c.per_class, c.seed)), Some((9, Some(4))));
        let data = with(&random, &["--ratio-split", "0.6,0.2"]);
        assert_eq!((data.class_split, data.ratio_split.map(|r| r.seed)), (None, Some(None)));
    }

    #[test]
    fn preset_is_an_enum_listed_in_help() {
        let args = train_args(&["--preset", "paper"]).unwrap();
        assert_eq!(args.shape.preset, Some(ModelPreset::Paper));
        assert_eq!(args.to_config().unwrap().model.preset, ModelPreset::Paper);
        let error = train_args(&["--preset", "huge"]).unwrap_err().to_string();
        assert!(error.contains("small") && error.contains("paper"), "{error}");
        let mut command = Cli::command();
        let help = command
            .find_subcommand_mut("train")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("small") && help.contains("paper"), "{help}");
    }

    #[test]
    fn plan_auto_is_the_enum_variant_and_a_path_is_a_file() {
        let auto = train_args(&["--plan", "auto"]).unwrap().to_config().unwrap();
        assert_eq!(auto.mesh.plan, Some(MeshPlan::Auto));
        let file = train_args(&["--plan", "plans/p.json"]).unwrap();
        assert_eq!(file.plan, Some(MeshPlan::File("plans/p.json".into())));
        // --cluster goes with --plan auto only
        let cluster = ["--plan", "plans/p.json", "--cluster", "c.toml"];
        let error = train_args(&cluster).unwrap().to_config().unwrap_err().to_string();
        assert!(error.contains("mesh.cluster"), "{error}");
    }

    #[test]
    fn sequences_take_the_strategy_by_its_config_name_listed_in_help() {
        let random = train_args(&["--sequences", "random"]).unwrap().to_config().unwrap();
        assert_eq!(random.data.sequences, SequenceStrategy::Random);
        let local = train_args(&["--sequences", "locality"]).unwrap().to_config().unwrap();
        assert_eq!(local.data.sequences, SequenceStrategy::Locality);
        let error = train_args(&["--sequences", "metis"]).unwrap_err().to_string();
        assert!(error.contains("locality") && error.contains("random"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("run.toml");
        std::fs::write(&config, "[data]\nsequences = \"random\"\n").unwrap();
        let from_file = train_args(&["--config", config.to_str().unwrap()]).unwrap().to_config().unwrap();
        assert_eq!(from_file.data.sequences, SequenceStrategy::Random);
    }

    #[test]
    fn prefetching_defaults_by_backend_and_the_flag_or_config_wins() {
        let prefetch = |args: &[&str]| train_args(args).unwrap().to_config().unwrap().data.prefetch_batches;
        assert_eq!(prefetch(&[]), Some(0));
        assert_eq!(prefetch(&["--prefetch-batches", "3"]), Some(3));
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("run.toml");
        std::fs::write(&config, "[data]\nprefetch_batches = 1\n").unwrap();
        assert_eq!(prefetch(&["--config", config.to_str().unwrap()]), Some(1));
        // GPU backends parse (and default to 2) even in builds without them
        let gpu = train_args(&["--backend", "cuda"]).unwrap();
        assert_eq!(gpu.to_config().ok().map(|c| c.data.prefetch_batches), Some(Some(2)));
    }

    #[test]
    fn the_ensemble_flag_reaches_the_config() {
        let config = train_args(&["--ensemble-epochs", "5"]).unwrap().to_config().unwrap();
        assert_eq!(config.training.ensemble_epochs, 5);
        assert_eq!(train_args(&[]).unwrap().to_config().unwrap().training.ensemble_epochs, 0);
        // refused beside Correct & Smooth, by name
        let err = train_args(&["--ensemble-epochs", "5", "--correct-smooth"]).unwrap().to_config().unwrap_err();
        assert!(err.to_string().contains("training.ensemble_epochs"), "{err}");
    }

    #[test]
    fn the_final_norm_and_l2_flags_reach_the_config() {
        let config = train_args(&["--no-final-norm", "--layer-l2", "0.01", "--classifier-l2", "0.02", "--input-l2", "0.03"])
            .unwrap()
            .to_config()
            .unwrap();
        assert!(!config.model.final_norm);
        let optimizer = &config.optimizer;
        assert_eq!((optimizer.input_l2, optimizer.layer_l2, optimizer.classifier_l2), (0.03, 0.01, 0.02));
        // without the flag a config's `final_norm = false` holds
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.toml");
        std::fs::write(&file, "[model]\nfinal_norm = false\n").unwrap();
        assert!(!train_args(&["--config", file.to_str().unwrap()]).unwrap().to_config().unwrap().model.final_norm);
        assert!(train_args(&[]).unwrap().to_config().unwrap().model.final_norm);
    }
}
