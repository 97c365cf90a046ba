//! Gradients as one flat buffer per stage, and their all-reduce over each stage's
//! `dp x cp` group with burn-collective.
//!
//! burn-collective 0.21 runs one collective group per backend type and process: every
//! registered peer joins every all-reduce. To reduce over each stage's group separately in one
//! call, every rank contributes a buffer laid out over ALL stages, holding its own stage's
//! gradients at that stage's offset and zeros elsewhere; after the `Sum` all-reduce each rank
//! reads back its stage's segment, which is then the sum over the ranks of its stage only
//! (adding zeros is exact). The buffer is the size of the whole model's parameters (a few MB for
//! the paper's model); one collective call per step.
//!
//! A stage's segment holds every float parameter's gradient flattened in visiting order, then
//! one presence flag per parameter (`1.0` if the rank's backward produced a gradient for it),
//! so a parameter no rank touched is left out of the optimizer step exactly as
//! [`GradientsParams::from_grads`] leaves it out on a single device.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use burn::collective::{
    CollectiveConfig, PeerId, ReduceOperation, all_reduce, finish_collective, register,
    reset_collective,
};
use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};

use crate::ParallelError;

/// Sizes of a module's flat gradient segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegmentLayout {
    /// Total number of float parameter elements.
    pub elements: usize,
    /// Number of float parameter tensors (one presence flag each).
    pub params: usize,
}

impl SegmentLayout {
    /// Length of the segment: elements plus presence flags.
    pub fn len(&self) -> usize {
        self.elements + self.params
    }

    /// The layout of `module`'s float parameters.
    pub fn of<B: Backend, M: burn::module::Module<B>>(module: &M) -> Self {
        struct Count(SegmentLayout);
        impl<B: Backend> ModuleVisitor<B> for Count {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                self.0.elements += param.shape().num_elements();
                self.0.params += 1;
            }
        }
        let mut count = Count(SegmentLayout::default());
        module.visit(&mut count);
        count.0
    }
}

/// Flattens the gradients of `module`'s float parameters found in `grads` into one segment
/// (see the module docs), on `device`.
pub(crate) fn flatten<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &B::Gradients,
    device: &B::Device,
) -> Tensor<B::InnerBackend, 1> {
    struct Collect<'a, B: AutodiffBackend> {
        grads: &'a B::Gradients,
        device: B::Device,
        parts: Vec<Tensor<B::InnerBackend, 1>>,
        present: Vec<f32>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let n = param.shape().num_elements();
            match param.val().grad(self.grads) {
                Some(grad) => {
                    self.parts.push(grad.reshape([n]));
                    self.present.push(1.0);
                }
                None => {
                    self.parts.push(Tensor::zeros([n], &self.device));
                    self.present.push(0.0);
                }
            }
        }
    }
    let mut collect = Collect::<B> {
        grads,
        device: device.clone(),
        parts: Vec::new(),
        present: Vec::new(),
    };
    module.visit(&mut collect);
    let mut parts = collect.parts;
    let flags = collect.present.len();
    parts.push(Tensor::from_data(
        burn::tensor::TensorData::new(collect.present, [flags]),
        device,
    ));
    Tensor::cat(parts, 0)
}

/// The [`GradientsParams`] of `module` from a flat segment (see [`flatten`]).
///
/// # Errors
///
/// A message when the segment cannot be read back.
pub(crate) fn unflatten<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    segment: Tensor<B::InnerBackend, 1>,
) -> Result<GradientsParams, String> {
    let layout = SegmentLayout::of::<B, M>(module);
    let flags = segment
        .clone()
        .slice(layout.elements..layout.len())
        .into_data()
        .iter::<f32>()
        .collect::<Vec<f32>>();
    if flags.len() != layout.params {
        return Err(format!(
            "gradient segment has {} presence flags, the module {} parameters",
            flags.len(),
            layout.params
        ));
    }
    struct Split<B: AutodiffBackend> {
        segment: Tensor<B::InnerBackend, 1>,
        flags: Vec<f32>,
        offset: usize,
        index: usize,
        grads: GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Split<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let shape = param.shape();
            let n = shape.num_elements();
            if self.flags.get(self.index).copied().unwrap_or(0.0) > 0.0 {
                let grad: Tensor<B::InnerBackend, D> = self
                    .segment
                    .clone()
                    .slice(self.offset..self.offset + n)
                    .reshape(shape);
                self.grads.register::<B::InnerBackend, D>(param.id, grad);
            }
            self.offset += n;
            self.index += 1;
        }
    }
    let mut split = Split::<B> {
        segment,
        flags,
        offset: 0,
        index: 0,
        grads: GradientsParams::new(),
    };
    module.visit(&mut split);
    Ok(split.grads)
}

/// One rank's membership in the mesh-wide gradient all-reduce.
pub(crate) struct GradientReducer {
    rank: usize,
    /// Offset of each stage's segment in the mesh-wide buffer, and the buffer length last.
    offsets: Vec<usize>,
}

impl GradientReducer {
    /// Registers `rank` with burn-collective for a mesh of `world` ranks whose stages have the
    /// given segment lengths. Blocks until every rank registered.
    ///
    /// # Errors
    ///
    /// [`ParallelError::Collective`] when registration fails.
    pub fn register<B: Backend>(
        rank: usize,
        world: usize,
        stage_lengths: &[usize],
        device: &B::Device,
    ) -> Result<Self, ParallelError> {
        register::<B>(
            PeerId::from(rank),
            device.clone(),
            CollectiveConfig::default().with_num_devices(world),
        )
        .map_err(|err| ParallelError::Collective {
            rank,
            operation: "register",
            message: format!("{err:?}"),
        })?;
        let mut offsets = Vec::with_capacity(stage_lengths.len() + 1);
        let mut total = 0;
        for len in stage_lengths {
            offsets.push(total);
            total += len;
        }
        offsets.push(total);
        Ok(Self { rank, offsets })
    }

    /// Sums `segment` (stage `stage`'s flat gradients on this rank) over every rank of the
    /// stage; returns this stage's summed segment.
    ///
    /// # Errors
    ///
    /// [`ParallelError::Collective`] when the all-reduce fails (also after the mesh was
    /// stopped: the coordinator resets the collective to release waiting ranks).
    pub fn all_reduce<B: Backend>(
        &self,
        stage: usize,
        segment: Tensor<B, 1>,
    ) -> Result<Tensor<B, 1>, ParallelError> {
        let device = segment.device();
        let start = self.offsets[stage];
        let end = self.offsets[stage + 1];
        let total = self.offsets[self.offsets.len() - 1];
        let mut parts = Vec::with_capacity(3);
        if start > 0 {
            parts.push(Tensor::zeros([start], &device));
        }
        parts.push(segment);
        if end < total {
            parts.push(Tensor::zeros([total - end], &device));
        }
        let buffer = Tensor::cat(parts, 0);
        let reduced = all_reduce::<B>(
            PeerId::from(self.rank),
            buffer.into_primitive().tensor(),
            ReduceOperation::Sum,
        )
        .map_err(|err| ParallelError::Collective {
            rank: self.rank,
            operation: "all_reduce",
            message: format!("{err:?}"),
        })?;
        let reduced: Tensor<B, 1> = Tensor::from_primitive(TensorPrimitive::Float(reduced));
        Ok(reduced.to_device(&device).slice(start..end))
    }

    /// Leaves the collective (errors are ignored: the mesh is shutting down).
    pub fn finish<B: Backend>(self) {
        if let Err(err) = finish_collective::<B>(PeerId::from(self.rank)) {
            log::debug!("rank {}: finish_collective: {err:?}", self.rank);
        }
    }
}

/// Forgets every registered peer and pending operation of the collective of backend `B`, which
/// releases ranks blocked in an all-reduce whose peer failed.
pub(crate) fn reset<B: Backend>() {
    reset_collective::<B>();
}

/// burn-collective keeps one group per backend type and process, so at most one mesh that
/// all-reduces may run at a time: [`CollectiveLease::acquire`] waits for the previous one to be
/// dropped.
pub(crate) struct CollectiveLease;

static BUSY: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();

impl CollectiveLease {
    /// Waits until no other mesh of this process uses the collective, then takes it; `None`
    /// when that takes longer than `patience`.
    pub fn acquire(patience: Duration) -> Option<Self> {
        let deadline = Instant::now() + patience;
        let mut busy = BUSY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while *busy {
            let left = deadline.checked_duration_since(Instant::now())?;
            busy = FREED
                .wait_timeout(busy, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        *busy = true;
        Some(CollectiveLease)
    }
}

impl Drop for CollectiveLease {
    fn drop(&mut self) {
        let mut busy = BUSY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *busy = false;
        FREED.notify_all();
    }
}
