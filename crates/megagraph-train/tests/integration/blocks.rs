//! A rank's block of a batch (its rows only, built without the others) equals those rows of the
//! whole batch: distance rows (also against the dense BFS index), structure dropout, labels,
//! weights and padding; later pipeline stages get no node input.

use burn::backend::Flex;
use burn::tensor::{Int, Tensor};
use megagraph_graph::{DistanceIndex, DistanceScope};
use megagraph_kernels::BucketIndex;
use megagraph_parallel::padded_len;
use megagraph_train::{MeshConfig, NodeBlock, RowLayout, SequenceDataset, TrainConfig, prepare};

type B = Flex;

fn dataset() -> SequenceDataset {
    let mut config = TrainConfig::default();
    // not a multiple of seq_len: some sequence is shorter (padding rows and columns)
    config.synthetic.nodes = 317;
    config.synthetic.classes = 3;
    config.synthetic.feature_dim = 8;
    config.data.seq_len = 50;
    prepare(&config).expect("prepare")
}

fn dense(index: BucketIndex<B>) -> Vec<i64> {
    index
        .to_dense()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_data()
        .iter::<i64>()
        .collect()
}

fn ints(t: Tensor<B, 2, Int>) -> Vec<i64> {
    t.into_data().iter::<i64>().collect()
}

#[test]
fn blocks_equal_the_rows_of_the_whole_batch() {
    let _turn = crate::turn();
    let data = dataset();
    let device = Default::default();
    let seq = data.seq_len;
    let short = (0..data.num_sequences())
        .min_by_key(|&i| data.sequences[i].len())
        .unwrap_or_default();
    assert!(data.sequences[short].len() < seq);
    let indices = [short, (short + 1) % data.num_sequences()];
    for dropout in [None, Some((0.3, 7))] {
        let whole = data.batch_with_structure_dropout::<B>(&indices, &device, dropout);
        let whole_index = dense(whole.graph.distance.clone());
        let whole_labels = ints(whole.labels.clone());
        for cp in [1, 2, 3, 4] {
            let frame = padded_len(seq, cp);
            let width = frame / cp;
            for position in 0..cp {
                let rows = position * width..(position + 1) * width;
                let NodeBlock { block, nodes } =
                    data.block::<B>(&indices, rows.clone(), frame, position == 0, &device, dropout);
                assert_eq!(block.input.is_some(), position == 0);
                let index = dense(block.index_rows);
                let labels = ints(block.labels);
                let far = (data.num_buckets - 1) as i64;
                for b in 0..indices.len() {
                    for (slot, i) in rows.clone().enumerate() {
                        for j in 0..frame {
                            let got = index[(b * width + slot) * frame + j];
                            let want = if i < seq && j < seq {
                                whole_index[(b * seq + i) * seq + j]
                            } else {
                                far
                            };
                            assert_eq!(got, want, "cp {cp} row {i} col {j} dropout {dropout:?}");
                        }
                        let label = if i < seq { whole_labels[b * seq + i] } else { 0 };
                        assert_eq!(labels[b * width + slot], label);
                        let node = (i < seq).then(|| whole.nodes[b * seq + i]).flatten();
                        assert_eq!(nodes[b * width + slot], node);
                    }
                }
            }
        }
    }
}

#[test]
fn batch_distances_equal_the_dense_bfs_index() {
    let _turn = crate::turn();
    let data = dataset();
    let device = Default::default();
    let seq = data.seq_len;
    for index in 0..data.num_sequences() {
        let batch = data.batch::<B>(&[index], &device);
        let got = dense(batch.graph.distance);
        let members = &data.sequences[index];
        let max_distance = (data.num_buckets - 2) as u8;
        let reference =
            DistanceIndex::new(&data.dataset.graph, members, max_distance, DistanceScope::Graph)
                .unwrap_or_else(|e| panic!("{e}"));
        for i in 0..members.len() {
            for j in 0..members.len() {
                assert_eq!(got[i * seq + j], i64::from(reference.get(i, j)), "({i}, {j})");
            }
        }
    }
}

#[test]
fn structure_dropout_drops_pairs_and_keeps_the_diagonal() {
    let _turn = crate::turn();
    let data = dataset();
    let device = Default::default();
    let seq = data.seq_len;
    let plain = dense(data.batch::<B>(&[0], &device).graph.distance);
    let dropped = dense(
        data.batch_with_structure_dropout::<B>(&[0], &device, Some((0.5, 3)))
            .graph
            .distance,
    );
    let far = (data.num_buckets - 1) as i64;
    let near: Vec<usize> = (0..seq * seq).filter(|&p| plain[p] != far && p / seq != p % seq).collect();
    let gone = near.iter().filter(|&&p| dropped[p] == far).count();
    assert!(gone > near.len() / 4 && gone < near.len() * 3 / 4, "{gone} of {}", near.len());
    for i in 0..seq {
        assert_eq!(dropped[i * seq + i], plain[i * seq + i]);
    }
}

#[test]
fn prefetched_rows_equal_rows_built_on_demand() {
    let _turn = crate::turn();
    let data = dataset();
    let device = Default::default();
    let seq = data.seq_len;
    let all: Vec<usize> = (0..data.num_sequences()).collect();
    let batches: Vec<&[usize]> = all.chunks(2).collect();
    for cp in [1, 3] {
        let frame = padded_len(seq, cp);
        let width = frame / cp;
        // every stage of a two-stage pipeline reads each block
        data.prefetch(&batches, RowLayout { cp, readers: 2 });
        let before = data.prefetched_reads();
        for batch in &batches {
            for position in 0..cp {
                let rows = position * width..(position + 1) * width;
                for _stage in 0..2 {
                    let prefetched =
                        data.block::<B>(batch, rows.clone(), frame, false, &device, None);
                    // nothing asked for now: built on demand
                    let fresh =
                        dataset().block::<B>(batch, rows.clone(), frame, false, &device, None);
                    assert_eq!(
                        dense(prefetched.block.index_rows),
                        dense(fresh.block.index_rows)
                    );
                    assert_eq!(prefetched.nodes, fresh.nodes);
                }
            }
        }
        // blocks past a short sequence's end hold no rows and are not built ahead
        let blocks: usize = all
            .iter()
            .map(|&index| {
                (0..cp)
                    .filter(|position| position * width < data.sequences[index].len())
                    .count()
            })
            .sum();
        let reads = (blocks * 2) as u64;
        assert_eq!(
            data.prefetched_reads() - before,
            reads,
            "cp {cp}: every read was prefetched"
        );
    }
}

#[test]
fn training_with_and_without_prefetching_gives_the_same_losses() {
    let _turn = crate::turn();
    let losses = |prefetch_batches, mesh| {
        let mut config = TrainConfig {
            mesh,
            ..TrainConfig::default()
        };
        config.synthetic.nodes = 240;
        config.data.seq_len = 40;
        config.data.prefetch_batches = Some(prefetch_batches);
        config.training.epochs = 2;
        config.training.batch_size = 2;
        // Burn's dropout stream differs between runs in one process; structure dropout does not
        config.model.dropout = 0.0;
        config.model.input_dropout = Some(0.0);
        config.model.key_dropout = Some(0.0);
        config.data.structure_dropout = 0.1;
        let data = std::sync::Arc::new(prepare(&config).expect("prepare"));
        let outcome = megagraph_train::NodeClassificationTrainer::new(&config, data.clone())
            .fit::<burn::backend::Autodiff<B>>(&Default::default(), &mut megagraph_train::Quiet)
            .expect("train");
        // the background builds were read (by the steps and by evaluation) only when asked for
        assert_eq!(data.prefetched_reads() > 0, prefetch_batches > 0);
        outcome
            .report
            .history
            .iter()
            .map(|epoch| epoch.loss)
            .collect::<Vec<_>>()
    };
    for mesh in [MeshConfig::default(), MeshConfig::new(2, 2, 1, 1)] {
        assert_eq!(losses(0, mesh.clone()), losses(3, mesh));
    }
}

#[test]
fn near_pairs_per_row_is_the_mean_stored_pairs_of_a_row() {
    let _turn = crate::turn();
    // 7 sequences of at most 50 rows: the sample is every row
    let data = dataset();
    assert!(data.num_sequences() <= 8 && data.seq_len <= 64);
    let (mut stored, mut rows) = (0, 0);
    for index in 0..data.num_sequences() {
        let len = data.sequences[index].len();
        stored += data.distance_rows(index, 0..len).nnz();
        rows += len;
    }
    assert_eq!(data.near_pairs_per_row(), stored.div_ceil(rows));
    // every row stores at least its own node
    assert!(data.near_pairs_per_row() >= 1);
}
