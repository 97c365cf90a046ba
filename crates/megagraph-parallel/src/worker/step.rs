//! One optimizer step of a rank: the 1F1B schedule over its micro-batches, the gradient
//! all-reduce and the update.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use burn::optim::Optimizer;
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use megagraph_layout::{PipelineAction, one_forward_one_backward};

use super::forward::InFlight;
use super::protocol::StepPlan;
use super::rank::Worker;
use super::report::RankReport;
use crate::ParallelError;
use crate::context::ContextParallelBackend;
use crate::gradients::{flatten, unflatten};
use crate::stage::StageModule;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

impl<B: ContextParallelBackend> Worker<B> {
    /// Bytes this rank's ring and Ulysses endpoints have sent so far.
    fn context_sent_bytes(&self) -> u64 {
        self.links.ring.sent_bytes() + self.links.ulysses.sent_bytes()
    }

    pub(super) fn step<O: Optimizer<StageModule<B>, B>>(
        &mut self,
        plan: &StepPlan,
        optimizer: &mut O,
    ) -> Result<(RankReport, Option<f64>), ParallelError> {
        let started = Instant::now();
        let ring_waited = self.links.ring.waited_seconds();
        let context_sent = self.context_sent_bytes();
        self.waited.set(Duration::ZERO);
        self.index_bytes.set((0, 0));
        self.meter.reset_peak();
        let micro_batches = plan
            .replicas
            .get(self.coord.dp_rank)
            .ok_or_else(|| self.internal("no micro-batches for this replica"))?;
        let schedule =
            one_forward_one_backward(self.coord.stage, self.shape.pp, micro_batches.len());
        let mut in_flight: HashMap<usize, InFlight<B>> = HashMap::new();
        let mut max_in_flight = 0;
        let mut loss = 0.0;
        let mut accumulated: Option<Tensor<Inner<B>, 1>> = None;
        for action in schedule {
            match action {
                PipelineAction::Forward(micro) => {
                    if let Some(fault) = self.fault
                        && fault.rank == self.rank
                        && fault.step == plan.step
                    {
                        panic!(
                            "injected fault on rank {} at step {} (test hook)",
                            self.rank, plan.step
                        );
                    }
                    let sequences = &micro_batches[micro];
                    let (saved, micro_loss) = self.forward(plan, micro, sequences)?;
                    // a sampling meter (GPU) reads here, with the micro-batch's activations live
                    self.meter.peak();
                    loss += micro_loss;
                    in_flight.insert(micro, saved);
                    max_in_flight = max_in_flight.max(in_flight.len());
                }
                PipelineAction::Backward(micro) => {
                    let saved = in_flight
                        .remove(&micro)
                        .ok_or_else(|| self.internal("backward before forward"))?;
                    let module = saved.module.clone();
                    let grads = self.backward(plan, micro, saved)?;
                    self.meter.peak();
                    if let Some(failure) = self.links.ring.take_failure().or_else(|| self.links.ulysses.take_failure()) {
                        return Err(failure);
                    }
                    let flat = flatten::<B, _>(&module, &grads, &self.device);
                    accumulated = Some(match accumulated {
                        Some(sum) => sum + flat,
                        None => flat,
                    });
                }
            }
        }
        let mut segment = accumulated.ok_or_else(|| self.internal("step without micro-batches"))?;
        let mut reduced_loss = None;
        if let Some(reducer) = &self.reducer {
            let reduce_started = Instant::now();
            let (summed, summed_loss) =
                reducer.all_reduce(self.coord.stage, segment, loss, plan.step)?;
            segment = summed;
            reduced_loss = Some(summed_loss);
            self.waited
                .set(self.waited.get() + reduce_started.elapsed());
        }
        let module = self
            .module
            .take()
            .ok_or_else(|| self.internal("stage module missing"))?;
        let grads = unflatten::<B, _>(&module, segment).map_err(|message| self.internal(&message));
        let grads = match grads {
            Ok(grads) => grads,
            Err(error) => {
                self.module = Some(module);
                return Err(error);
            }
        };
        self.module = Some(optimizer.step(plan.lr, module, grads));
        let seconds = started.elapsed().as_secs_f64();
        let waited =
            self.waited.get().as_secs_f64() + self.links.ring.waited_seconds() - ring_waited;
        let report = RankReport {
            rank: self.rank,
            coord: self.coord,
            loss,
            max_in_flight,
            seconds,
            busy_seconds: (seconds - waited).max(0.0),
            peak_bytes: self.peak_bytes(),
            index_bytes: self.index_bytes.get().0,
            dense_index_bytes: self.index_bytes.get().1,
            context_sent_bytes: self.context_sent_bytes() - context_sent,
        };
        Ok((report, reduced_loss))
    }
}
