//! The backward pass of one micro-batch on a rank.

use burn::tensor::Tensor;

use super::forward::InFlight;
use super::protocol::StepPlan;
use super::rank::Worker;
use crate::ParallelError;
use crate::context::{ContextParallelBackend, RingCall};
use crate::mesh::ActivationGrad;

impl<B: ContextParallelBackend> Worker<B> {
    /// Backward pass of one micro-batch; sends the gradients of the input, the table and the
    /// dense bias (if any) to the previous stage and returns the gradients.
    pub(super) fn backward(
        &self,
        plan: &StepPlan,
        micro: usize,
        saved: InFlight<B>,
    ) -> Result<B::Gradients, ParallelError> {
        // see `RingEndpoint::barrier`: no ring peer may still be waiting for someone else
        // once this rank's backward holds its graph lock
        let barrier = || {
            if self.shape.cp > 1 {
                self.links.ring.barrier(RingCall {
                    step: plan.step,
                    micro,
                    layer: usize::MAX,
                })
            } else {
                Ok(())
            }
        };
        let grads = match (saved.loss, saved.output) {
            (Some(loss), _) => {
                barrier()?;
                loss.backward()
            }
            (None, Some(output)) => {
                let message = self.receive_from_stage(
                    self.links.grad_in.as_ref(),
                    "gradient",
                    self.coord.stage + 1,
                    plan.step,
                    micro,
                )?;
                let grad_x = Tensor::<B, 3>::from_inner(message.x.to_device(&self.inner_device));
                let grad_table =
                    Tensor::<B, 2>::from_inner(message.table.to_device(&self.inner_device));
                // d(surrogate)/d(output) = grad_x, d/d(table) = grad_table and d/d(dense) =
                // grad_dense exactly
                let mut surrogate = (output * grad_x).sum() + (saved.table.clone() * grad_table).sum();
                match (&saved.dense, message.dense) {
                    (Some(dense), Some(grad_dense)) => {
                        let grad_dense = Tensor::<B, 4>::from_inner(grad_dense.to_device(&self.inner_device));
                        surrogate = surrogate + (dense.clone() * grad_dense).sum();
                    }
                    (None, None) => {}
                    _ => return Err(self.internal("the dense bias and its gradient disagree")),
                }
                barrier()?;
                surrogate.backward()
            }
            (None, None) => return Err(self.internal("micro-batch without output")),
        };
        if let (Some(input), Some(link)) = (&saved.input, &self.links.grad_out) {
            let grad_x = input
                .grad(&grads)
                .unwrap_or_else(|| input.clone().inner().zeros_like());
            let grad_table = saved
                .table
                .grad(&grads)
                .unwrap_or_else(|| saved.table.clone().inner().zeros_like());
            let grad_dense = saved.dense.as_ref().map(|dense| {
                dense
                    .grad(&grads)
                    .unwrap_or_else(|| dense.clone().inner().zeros_like())
            });
            let gradient = ActivationGrad {
                step: plan.step,
                micro,
                x: grad_x,
                table: grad_table,
                dense: grad_dense,
            };
            self.send_to_stage(link, gradient, "gradient", self.coord.stage - 1)?;
        }
        Ok(grads)
    }
}
