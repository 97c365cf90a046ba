//! The model replicas of the workers must stay equal: a check after every epoch.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::error::{Result, TemporalTrainError};

/// Every float parameter of `module`, flattened in visiting order.
pub(crate) fn parameters<B: Backend, M: Module<B>>(module: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl<B: Backend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.extend(param.val().into_data().iter::<f32>());
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

/// Checks that every replica in `replicas` has worker 0's parameters exactly.
///
/// # Errors
///
/// [`TemporalTrainError::ReplicasDiverged`] naming the first worker that differs.
pub(crate) fn check_replicas<B: Backend, M: Module<B>>(replicas: &[&M], epoch: usize) -> Result<()> {
    let Some((first, rest)) = replicas.split_first() else {
        return Ok(());
    };
    let reference = parameters::<B, M>(first);
    for (index, replica) in rest.iter().enumerate() {
        let values = parameters::<B, M>(replica);
        let difference = if values.len() == reference.len() {
            reference
                .iter()
                .zip(&values)
                .map(|(a, b)| f64::from((a - b).abs()))
                .fold(0.0, f64::max)
        } else {
            f64::INFINITY
        };
        if difference != 0.0 {
            return Err(TemporalTrainError::ReplicasDiverged {
                worker: index + 1,
                epoch,
                difference,
            });
        }
    }
    Ok(())
}
