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
    /// The memoryless baseline: TGN without its memory.
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
    /// Reads node features only: edge features are kept for the configuration's record.
    pub fn dysat(dim_node: usize, dim_edge: usize) -> Self {
        Self::new(EmbeddingKind::Dysat)
            .with_dim_node(dim_node)
            .with_dim_edge(dim_edge)
            .with_snapshots(3)
    }

    /// The memoryless baseline: [`tgn`](Self::tgn) without its memory (one layer of temporal
    /// graph attention over node features, or zeros).
    pub fn none(dim_node: usize, dim_edge: usize) -> Self {
        Self::tgn(dim_node, dim_edge).with_memory_update(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temporal::reference::{Rng, mask, read, tensor};
    use crate::temporal::{
        Mailbox, MemoryRows, NeighbourHop, NodeMemory, NodeRows, SnapshotNeighbourhood,
        TemporalBatch, TemporalModel,
    };
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::Tensor;

    type B = Autodiff<Flex>;
    const NODES: usize = 10;
    const EVENTS: usize = 3;
    const NEGATIVES: usize = 2;
    const FANOUT: usize = 2;

    fn small(preset: TemporalPreset, dim_node: usize) -> TemporalModelConfig {
        preset
            .config(dim_node, 2)
            .with_dim_memory(8)
            .with_dim_time(4)
            .with_dim_out(6)
            .with_dropout(0.0)
    }

    /// Random node ids, times and neighbourhoods for `config`, reading `memory` and `mailbox`.
    fn batch(
        config: &TemporalModelConfig,
        memory: &NodeMemory<B>,
        mailbox: &Mailbox<B>,
        rng: &mut Rng,
    ) -> (TemporalBatch<B>, Vec<usize>) {
        let device = Default::default();
        let mut ids = |n: usize| -> Vec<usize> {
            (0..n)
                .map(|_| (rng.uniform(0.0, NODES as f32) as usize).min(NODES - 1))
                .collect()
        };
        let roots = EVENTS * (2 + NEGATIVES);
        let hops = if config.embedding == EmbeddingKind::Attention {
            config.layers
        } else {
            0
        };
        let level_ids: Vec<Vec<usize>> = (0..=hops)
            .map(|l| ids(roots * FANOUT.pow(l as u32)))
            .collect();
        let root_ids = level_ids[0].clone();
        let mut rows = |ids: &[usize]| NodeRows {
            time: tensor(rng.values(ids.len(), 100.0, 200.0), [ids.len()], &device),
            features: (config.dim_node > 0)
                .then(|| rng.tensor::<B, 2>([ids.len(), config.dim_node], &device).0),
            memory: config.memory_update.map(|_| {
                MemoryRows::gather(memory, mailbox, ids).unwrap_or_else(|err| panic!("{err}"))
            }),
        };
        let levels: Vec<NodeRows<B>> = level_ids.iter().map(|ids| rows(ids)).collect();
        let hops = (0..hops)
            .map(|l| {
                let n = roots * FANOUT.pow(l as u32);
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
        let dim = config.dim_hidden();
        let snapshots = (config.embedding == EmbeddingKind::Dysat).then(|| SnapshotNeighbourhood {
            roots: rng
                .tensor::<B, 3>([roots, config.snapshots, dim], &device)
                .0,
            neighbours: rng
                .tensor::<B, 4>([roots, config.snapshots, FANOUT, dim], &device)
                .0,
            padding: mask(
                (0..roots * config.snapshots * FANOUT)
                    .map(|i| i % 4 == 0)
                    .collect(),
                [roots, config.snapshots, FANOUT],
                &device,
            ),
        });
        let batch = TemporalBatch {
            num_negatives: NEGATIVES,
            levels,
            hops,
            snapshots,
        };
        (batch, root_ids)
    }

    #[test]
    fn presets_build_run_and_write_their_memory() {
        let device = Default::default();
        let mut rng = Rng::new();
        for (name, preset) in TemporalPreset::ALL {
            assert_eq!(TemporalPreset::from_name(name), Some(preset));
            assert_eq!(preset.name(), name);
            for dim_node in [0, 3] {
                let config = small(preset, dim_node);
                let model: TemporalModel<B> = config.init(&device);
                let mut memory = NodeMemory::<B>::new(NODES, config.dim_memory, &device);
                let mut mailbox =
                    Mailbox::<B>::new(NODES, config.mailbox_size, config.dim_mail(), &device);
                for step in 0..2 {
                    let (batch, ids) = batch(&config, &memory, &mailbox, &mut rng);
                    let event_time = batch.levels[0].time.clone().narrow(0, 0, EVENTS);
                    let output = model.forward(batch);
                    let what = format!(
                        "{name} (dim_node {dim_node}, step {step}, seed {})",
                        rng.seed
                    );
                    assert_eq!(output.positive.dims(), [EVENTS], "{what}");
                    assert_eq!(output.negative.dims(), [EVENTS, NEGATIVES], "{what}");
                    let logits =
                        [read(output.positive.clone()), read(output.negative.clone())].concat();
                    assert!(logits.iter().all(|v| v.is_finite()), "{what}: {logits:?}");
                    let grads = (output.positive.sum() - output.negative.sum()).backward();
                    assert!(
                        model.predictor.out_fc.weight.grad(&grads).is_some(),
                        "{what}: no gradient"
                    );
                    assert_eq!(
                        output.memory.is_some(),
                        config.memory_update.is_some(),
                        "{what}"
                    );
                    if let Some(updated) = output.memory {
                        assert_eq!(
                            updated.dims(),
                            [EVENTS * (2 + NEGATIVES), config.dim_memory],
                            "{what}"
                        );
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
}
