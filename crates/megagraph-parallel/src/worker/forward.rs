//! The forward pass of one micro-batch on a rank.

use burn::tensor::{ElementConversion, Tensor};
use megagraph_kernels::BucketIndex;
use megagraph_models::masked_smoothed_cross_entropy;

use super::protocol::StepPlan;
use super::rank::Worker;
use crate::{CpMode, ParallelError};
use crate::context::{ContextParallelBackend, RingCall};
use crate::data::BlockRequest;
use crate::mesh::Activation;
use crate::stage::{BlockContext, StageModule, UlyssesContext, fresh_leaves};

/// A micro-batch between its forward and backward passes.
pub(super) struct InFlight<B: ContextParallelBackend> {
    /// The stage's parameters as this micro-batch's own leaves (see
    /// [`fresh_leaves`](crate::stage::fresh_leaves)); its gradients are read from them.
    pub(super) module: StageModule<B>,
    /// The stage's output (stages before the last).
    pub(super) output: Option<Tensor<B, 3>>,
    /// The micro-batch's loss (last stage).
    pub(super) loss: Option<Tensor<B, 1>>,
    /// The spatial table used: stage 0's parameter, or the received leaf.
    pub(super) table: Tensor<B, 2>,
    /// The received activation leaf (stages after the first).
    pub(super) input: Option<Tensor<B, 3>>,
    /// The edge encoding's dense bias used: stage 0's output of its encoder, or the received
    /// leaf; `None` without an edge encoding.
    pub(super) dense: Option<Tensor<B, 4>>,
}

impl<B: ContextParallelBackend> Worker<B> {
    /// The distance index of every row of the padded sequences, `[batch, padded, padded]`, for
    /// Ulysses: this rank's rows `own` and the other blocks' rows, asked of the source without
    /// their node inputs (held dense).
    fn whole_index(
        &self,
        sequences: &[usize],
        request: BlockRequest,
        own: BucketIndex<B>,
    ) -> Result<BucketIndex<B>, ParallelError> {
        let rank = self.rank;
        let mut rows = Vec::with_capacity(request.cp);
        for position in 0..request.cp {
            let index = if position == request.position {
                own.clone()
            } else {
                let other = BlockRequest {
                    position,
                    with_input: false,
                    ..request
                };
                self.source
                    .block(sequences, other, &self.device)
                    .map_err(|message| ParallelError::Source { rank, message })?
                    .index_rows
            };
            rows.push(index.to_dense().map_err(|source| ParallelError::Attention { rank, source })?);
        }
        Ok(Tensor::cat(rows, 1).into())
    }

    /// Forward pass of one micro-batch; returns what its backward needs and its loss (last
    /// stage; 0 elsewhere).
    pub(super) fn forward(
        &self,
        plan: &StepPlan,
        micro: usize,
        sequences: &[usize],
    ) -> Result<(InFlight<B>, f64), ParallelError> {
        let source_error = |message: String| ParallelError::Source {
            rank: self.rank,
            message,
        };
        let request = BlockRequest {
            cp: self.shape.cp,
            position: self.coord.cp_rank,
            with_input: self.coord.stage == 0,
        };
        let block = self
            .source
            .block(sequences, request, &self.device)
            .map_err(source_error)?;
        let [batch, rows, columns] = block.index_rows.dims();
        let (held, dense) = self.index_bytes.get();
        self.index_bytes.set((
            held.max(block.index_rows.bytes()),
            dense.max(batch * rows * columns),
        ));
        let module = fresh_leaves(self.module()?.clone());
        let (x, table, dense, input) = if self.coord.stage == 0 {
            let node_input = block
                .input
                .ok_or_else(|| self.internal("the source gave stage 0 no node input"))?;
            let x = module
                .embed(node_input, block.in_degree, block.out_degree)
                .ok_or_else(|| self.internal("stage 0 without embedding"))?;
            let table = module
                .spatial
                .as_ref()
                .ok_or_else(|| self.internal("stage 0 without spatial table"))?
                .table
                .val();
            let dense = module
                .edge_bias(block.edge_paths.as_ref())
                .map_err(|source| ParallelError::Attention { rank: self.rank, source })?;
            (x, table, dense, None)
        } else {
            let message = self.receive_from_stage(
                self.links.activation_in.as_ref(),
                "activation",
                self.coord.stage - 1,
                plan.step,
                micro,
            )?;
            let x =
                Tensor::<B, 3>::from_inner(message.x.to_device(&self.inner_device)).require_grad();
            let table = Tensor::<B, 2>::from_inner(message.table.to_device(&self.inner_device))
                .require_grad();
            let dense = message
                .dense
                .map(|dense| Tensor::<B, 4>::from_inner(dense.to_device(&self.inner_device)).require_grad());
            (x.clone(), table, dense, Some(x))
        };
        let ulysses = if self.cp_mode == CpMode::Ulysses && self.shape.cp > 1 {
            Some(UlyssesContext {
                index: self.whole_index(sequences, request, block.index_rows.clone())?,
                group: &self.links.ulysses,
            })
        } else {
            None
        };
        let context = BlockContext {
            ulysses,
            index_rows: block.index_rows,
            padding: block.padding,
            table: table.clone(),
            dense: dense.clone(),
            ring: &self.links.ring,
            call: RingCall {
                step: plan.step,
                micro,
                layer: 0,
            },
        };
        let output = module.forward_layers(x, &context)?;
        if self.is_last() {
            let logits = module
                .head(output)
                .ok_or_else(|| self.internal("last stage without head"))?;
            let loss = masked_smoothed_cross_entropy(
                logits,
                block.labels,
                block.weight,
                plan.train_nodes,
                self.label_smoothing,
            );
            let value = loss.clone().into_scalar().elem::<f64>();
            Ok((
                InFlight {
                    module,
                    output: None,
                    loss: Some(loss),
                    table,
                    input,
                    dense,
                },
                value,
            ))
        } else {
            let link = self
                .links
                .activation_out
                .as_ref()
                .ok_or_else(|| self.internal("no activation link"))?;
            let activation = Activation {
                step: plan.step,
                micro,
                x: output.clone().inner(),
                table: table.clone().inner(),
                dense: dense.clone().map(|dense| dense.inner()),
            };
            self.send_to_stage(link, activation, "activation", self.coord.stage + 1)?;
            Ok((
                InFlight {
                    module,
                    output: Some(output),
                    loss: None,
                    table,
                    input,
                    dense,
                },
                0.0,
            ))
        }
    }
}
