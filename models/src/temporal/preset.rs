//! The named temporal models: TGL's configurations of TGN, JODIE, APAN, TGAT and DySAT, and a
//! memoryless baseline.

use super::{EmbeddingKind, MemoryUpdateKind, TemporalModelConfig};

/// A named temporal model (`--model tgn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TemporalPreset {
    /// TGN: GRU memory, one hop of temporal graph attention.
    Tgn,
    /// JODIE: RNN memory, identity embedding with JODIE's time projection.
    Jodie,
    /// APAN: attention over a mailbox of 10, identity embedding.
    Apan,
    /// TGAT: no memory, two hops of temporal graph attention.
    Tgat,
    /// DySAT: no memory, structural and temporal attention over 3 snapshots.
    Dysat,
    /// The memoryless baseline: a static model over node inputs alone (no memory, no
    /// neighbours, no time).
    None,
}

impl TemporalPreset {
    /// All presets, with their names.
    pub const ALL: [(&'static str, TemporalPreset); 6] = [
        ("tgn", TemporalPreset::Tgn),
        ("jodie", TemporalPreset::Jodie),
        ("apan", TemporalPreset::Apan),
        ("tgat", TemporalPreset::Tgat),
        ("dysat", TemporalPreset::Dysat),
        ("none", TemporalPreset::None),
    ];

    /// The preset's name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("none", |(n, _)| n)
    }

    /// Looks a preset up by name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }

    /// The preset's configuration for data with `dim_node`-wide node features and
    /// `dim_edge`-wide edge features (0 for none).
    pub fn config(self, dim_node: usize, dim_edge: usize) -> TemporalModelConfig {
        match self {
            TemporalPreset::Tgn => TemporalModelConfig::tgn(dim_node, dim_edge),
            TemporalPreset::Jodie => TemporalModelConfig::jodie(dim_node, dim_edge),
            TemporalPreset::Apan => TemporalModelConfig::apan(dim_node, dim_edge),
            TemporalPreset::Tgat => TemporalModelConfig::tgat(dim_node, dim_edge),
            TemporalPreset::Dysat => TemporalModelConfig::dysat(dim_node, dim_edge),
            TemporalPreset::None => TemporalModelConfig::none(dim_node, dim_edge),
        }
    }
}

impl TemporalModelConfig {
    /// TGN (TGL's `tgn.yml`): GRU memory of 100, mailbox of 1, one layer of temporal graph
    /// attention with 2 heads, time encodings and embeddings of 100.
    pub fn tgn(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Attention)
            .with_memory_update(Some(MemoryUpdateKind::Gru))
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
    }

    /// JODIE (`jodie.yml`): RNN memory of 100, identity embedding with the time projection.
    pub fn jodie(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Jodie)
            .with_memory_update(Some(MemoryUpdateKind::Rnn))
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
    }

    /// APAN (`apan.yml`): the memory attends over a mailbox of 10 with 2 heads; identity
    /// embedding.
    pub fn apan(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Identity)
            .with_memory_update(Some(MemoryUpdateKind::Transformer))
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
            .with_mailbox_size(10)
    }

    /// TGAT (`tgat.yml`): no memory, two layers of temporal graph attention with 2 heads.
    pub fn tgat(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Attention)
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
            .with_layers(2)
    }

    /// DySAT (`dysat.yml`): no memory, a GAT per snapshot and self-attention over 3 snapshots.
    /// Reads node inputs only (edge features are kept for the configuration's record): without
    /// node features, give it learned ones with `with_embedded_nodes`.
    pub fn dysat(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Dysat)
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
            .with_snapshots(3)
    }

    /// The memoryless baseline: no memory and no neighbourhood, the edge predictor over the
    /// (layer-normalized) node inputs alone: a static embedding model, which sees nothing of
    /// time. Give it learned inputs with `with_embedded_nodes` on featureless data.
    pub fn none(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Identity)
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, mask, read, tensor};
    use crate::temporal::rows::index_tensor;
    use crate::temporal::{
        Mailbox, MemoryRows, NeighbourHop, NodeMemory, NodeRows, SnapshotNeighbourhood,
        TemporalBatch, TemporalModel,
    };
    use burn::backend::{Autodiff, Flex};
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use burn::tensor::Tensor;
    use burn::tensor::activation::log_sigmoid;
    use burn::tensor::backend::AutodiffBackend;

    type B = Autodiff<Flex>;
    const NODES: usize = 10;
    const EVENTS: usize = 3;
    const NEGATIVES: usize = 2;
    const FANOUT: usize = 2;
    const ROOTS: usize = EVENTS * (2 + NEGATIVES);
    const STEPS: usize = 150;

    /// The preset, narrowed; node inputs: none, random features of width 3, or learned.
    fn small(preset: TemporalPreset, inputs: &str) -> TemporalModelConfig {
        let dim_node = if inputs == "none" { 0 } else { 3 };
        preset
            .config(dim_node, 2)
            .with_dim_memory(8)
            .with_dim_time(4)
            .with_dim_out(6)
            .with_dropout(0.0)
            .with_embedded_nodes(if inputs == "learned" { NODES } else { 0 })
    }

    /// Inputs of nodes `ids`: the model's learned vectors, else random features of width
    /// `dim_node`, else `None`.
    fn features(
        model: &TemporalModel<B>,
        dim_node: usize,
        ids: &[usize],
        rng: &mut Rng,
    ) -> Option<Tensor<B, 2>> {
        let device = Default::default();
        model.node_features(index_tensor(ids, &device)).or_else(|| {
            (dim_node > 0).then(|| rng.tensor::<B, 2>([ids.len(), dim_node], &device).0)
        })
    }

    /// Random node ids, times and neighbourhoods for `config`, reading `memory` and `mailbox`.
    fn batch(
        config: &TemporalModelConfig,
        model: &TemporalModel<B>,
        memory: &NodeMemory<B>,
        mailbox: &Mailbox<B>,
        rng: &mut Rng,
    ) -> (TemporalBatch<B>, Vec<usize>) {
        let device = Default::default();
        let ids = |n: usize, rng: &mut Rng| -> Vec<usize> {
            (0..n)
                .map(|_| (rng.uniform(0.0, NODES as f32) as usize).min(NODES - 1))
                .collect()
        };
        let attention = config.embedding == EmbeddingKind::Attention;
        let hops = if attention { config.layers } else { 0 };
        let mut level_ids: Vec<Vec<usize>> = (0..=hops)
            .map(|l| ids(ROOTS * FANOUT.pow(l as u32), rng))
            .collect();
        let levels = level_ids
            .iter()
            .map(|ids| NodeRows {
                time: tensor(rng.values(ids.len(), 100.0, 200.0), [ids.len()], &device),
                features: features(model, config.dim_node, ids, rng),
                memory: config.memory_update.map(|_| {
                    MemoryRows::gather(memory, mailbox, ids).unwrap_or_else(|err| panic!("{err}"))
                }),
                expand: None,
            })
            .collect();
        let hops = (0..hops)
            .map(|l| {
                let n = ROOTS * FANOUT.pow(l as u32);
                NeighbourHop {
                    edge_feat: Some(rng.tensor::<B, 3>([n, FANOUT, config.dim_edge], &device).0),
                    delta_t: tensor(rng.values(n * FANOUT, 0.0, 50.0), [n, FANOUT], &device),
                    padding: mask(
                        (0..n * FANOUT).map(|i| i % 3 == 1).collect(),
                        [n, FANOUT],
                        &device,
                    ),
                }
            })
            .collect();
        let snapshots = (config.embedding == EmbeddingKind::Dysat).then(|| {
            let (s, dim) = (config.snapshots, config.dim_hidden());
            let mut read = |n: usize| {
                let ids = ids(n, rng);
                features(model, config.dim_node, &ids, rng)
                    .unwrap_or_else(|| Tensor::zeros([n, dim], &device))
            };
            SnapshotNeighbourhood {
                roots: read(ROOTS * s).reshape([ROOTS, s, dim]),
                neighbours: read(ROOTS * s * FANOUT).reshape([ROOTS, s, FANOUT, dim]),
                padding: mask(
                    (0..ROOTS * s * FANOUT).map(|i| i % 4 == 0).collect(),
                    [ROOTS, s, FANOUT],
                    &device,
                ),
            }
        });
        let batch = TemporalBatch {
            num_negatives: NEGATIVES,
            levels,
            hops,
            snapshots,
        };
        (batch, level_ids.swap_remove(0))
    }

    /// Counts a module's float parameters and those without a gradient.
    struct GradientCoverage<'a> {
        grads: &'a <B as AutodiffBackend>::Gradients,
        params: usize,
        without: usize,
    }

    impl ModuleVisitor<B> for GradientCoverage<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.params += 1;
            self.without += usize::from(param.grad(self.grads).is_none());
        }
    }

    /// Binary cross-entropy of positives (label 1) and negatives (label 0), mean over each.
    fn bce(positive: Tensor<B, 1>, negative: Tensor<B, 2>) -> Tensor<B, 1> {
        -(log_sigmoid(positive).mean() + log_sigmoid(-negative).mean())
    }

    #[test]
    fn presets_build_run_train_every_parameter_and_write_their_memory() {
        let device = Default::default();
        let mut rng = Rng::new();
        for (name, preset) in TemporalPreset::ALL {
            assert_eq!(TemporalPreset::from_name(name), Some(preset));
            assert_eq!(preset.name(), name);
            for inputs in ["none", "random", "learned"] {
                let config = small(preset, inputs);
                let model: TemporalModel<B> = config.init(&device);
                let mut memory = NodeMemory::<B>::new(NODES, config.dim_memory, &device);
                let mut mailbox =
                    Mailbox::<B>::new(NODES, config.mailbox_size, config.dim_mail(), &device);
                for step in 0..2 {
                    let (batch, ids) = batch(&config, &model, &memory, &mailbox, &mut rng);
                    let event_time = batch.levels[0].time.clone().narrow(0, 0, EVENTS);
                    let output = model.forward(batch);
                    let what = format!("{name} ({inputs} inputs, step {step}, seed {})", rng.seed);
                    assert_eq!(output.positive.dims(), [EVENTS], "{what}");
                    assert_eq!(output.negative.dims(), [EVENTS, NEGATIVES], "{what}");
                    let logits =
                        [read(output.positive.clone()), read(output.negative.clone())].concat();
                    assert!(logits.iter().all(|v| v.is_finite()), "{what}: {logits:?}");
                    let grads = bce(output.positive, output.negative).backward();
                    let mut coverage = GradientCoverage {
                        grads: &grads,
                        params: 0,
                        without: 0,
                    };
                    model.visit(&mut coverage);
                    assert_eq!(
                        coverage.without, 0,
                        "{what}: of {} parameters",
                        coverage.params
                    );
                    assert_eq!(
                        output.memory.is_some(),
                        config.memory_update.is_some(),
                        "{what}"
                    );
                    if let Some(updated) = output.memory {
                        assert_eq!(updated.dims(), [ROOTS, config.dim_memory], "{what}");
                        let edge_feat = Tensor::ones([EVENTS, config.dim_edge], &device);
                        let write = model.memory_update(updated, event_time, Some(edge_feat));
                        let (src, dst) = (&ids[..EVENTS], &ids[EVENTS..2 * EVENTS]);
                        write
                            .apply(src, dst, &mut memory, &mut mailbox)
                            .unwrap_or_else(|err| panic!("{what}: {err}"));
                        assert!(
                            src.iter().chain(dst).all(|&id| mailbox.received()[id] > 0),
                            "{what}"
                        );
                    }
                }
            }
        }
    }

    /// The parameters' gradients of `loss`, flattened in visiting order.
    struct ParamGradients<'a> {
        grads: &'a <B as AutodiffBackend>::Gradients,
        values: Vec<Vec<f64>>,
    }

    impl ModuleVisitor<B> for ParamGradients<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.values.push(param.grad(self.grads).map_or_else(Vec::new, |g| {
                g.into_data().iter::<f32>().map(f64::from).collect()
            }));
        }
    }

    #[test]
    fn levels_of_distinct_rows_give_the_values_and_gradients_of_rows_written_out() {
        let device = Default::default();
        let mut rng = Rng::new();
        for (name, preset) in TemporalPreset::ALL {
            // random inputs: learned ones would join the two runs' graphs through the batch
            let config = small(preset, "random");
            let model: TemporalModel<B> = config.init(&device);
            let mut memory = NodeMemory::<B>::new(NODES, config.dim_memory, &device);
            let mut mailbox =
                Mailbox::<B>::new(NODES, config.mailbox_size, config.dim_mail(), &device);
            // a first step, so that memory and mails are not all zero
            let (first, ids) = batch(&config, &model, &memory, &mailbox, &mut rng);
            let event_time = first.levels[0].time.clone().narrow(0, 0, EVENTS);
            if let Some(updated) = model.forward(first).memory {
                let edge_feat = Tensor::ones([EVENTS, config.dim_edge], &device);
                model
                    .memory_update(updated, event_time, Some(edge_feat))
                    .apply(&ids[..EVENTS], &ids[EVENTS..2 * EVENTS], &mut memory, &mut mailbox)
                    .unwrap_or_else(|err| panic!("{name}: {err}"));
            }
            let (stored, _) = batch(&config, &model, &memory, &mailbox, &mut rng);
            // every level's rows repeat stored rows: row i reads stored row (i · 7) mod n / 2 · 2
            let mut distinct = stored.clone();
            let mut written = stored;
            for (level, full) in distinct.levels.iter_mut().zip(&mut written.levels) {
                let n = level.len();
                let index: Vec<usize> = (0..n).map(|i| (i * 7) % n / 2 * 2).collect();
                level.expand = Some(index_tensor(&index, &device));
                *full = full.clone().select(index_tensor(&index, &device));
            }
            let run = |batch: TemporalBatch<B>| {
                let output = model.forward(batch);
                let values = [
                    read(output.positive.clone()),
                    read(output.negative.clone()),
                    output.memory.clone().map_or_else(Vec::new, read),
                ];
                let grads = bce(output.positive, output.negative).backward();
                let mut params = ParamGradients { grads: &grads, values: Vec::new() };
                model.visit(&mut params);
                (values, params.values)
            };
            let (distinct_values, distinct_grads) = run(distinct);
            let (written_values, written_grads) = run(written);
            let what = format!("{name} (seed {})", rng.seed);
            for (d, w) in distinct_values.iter().zip(&written_values) {
                assert_eq!(d, w, "{what}: forward values");
            }
            for (p, (d, w)) in distinct_grads.iter().zip(&written_grads).enumerate() {
                assert_eq!(d.len(), w.len(), "{what}: parameter {p}");
                for (a, b) in d.iter().zip(w) {
                    assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{what}: parameter {p}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn every_preset_fits_a_fixed_batch() {
        let device = Default::default();
        let mut rng = Rng::new();
        for (name, preset) in TemporalPreset::ALL {
            // wider than `small`: a narrow predictor's ReLU can die for good at initialization
            let config = small(preset, "random").with_dim_memory(16).with_dim_out(16);
            // the static baseline reads its inputs alone: three normalized numbers a row are too
            // few to tell the batch's pairs apart
            let config = if preset == TemporalPreset::None {
                config.with_dim_node(16)
            } else {
                config
            };
            let mut model: TemporalModel<B> = config.init(&device);
            let memory = NodeMemory::<B>::new(NODES, config.dim_memory, &device);
            let mailbox = Mailbox::<B>::new(NODES, config.mailbox_size, config.dim_mail(), &device);
            let (batch, _) = batch(&config, &model, &memory, &mailbox, &mut rng);
            let mut optimizer = AdamConfig::new().init::<B, TemporalModel<B>>();
            let mut losses = Vec::new();
            for _ in 0..STEPS {
                let output = model.forward(batch.clone());
                let loss = bce(output.positive, output.negative);
                losses.push(read(loss.clone())[0]);
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                model = optimizer.step(3e-3, model, grads);
            }
            let best = losses.iter().copied().fold(f64::INFINITY, f64::min);
            assert!(
                best < 0.5 * losses[0],
                "{name}: BCE {} → best {best} in {STEPS} steps (seed {})",
                losses[0],
                rng.seed
            );
        }
    }
}
