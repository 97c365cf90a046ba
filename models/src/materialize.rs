//! [`materialize`]: draw every lazily initialized parameter of a module now.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// `module` with every lazily initialized parameter drawn now.
///
/// Burn initializes a parameter when it is first read, so clones of a fresh module made before
/// that read would each draw their own values. After `materialize` every clone (the learner's,
/// a mesh's ranks') holds the same values.
pub fn materialize<B: Backend, M: Module<B>>(module: M) -> M {
    struct Touch;
    impl<B: Backend> ModuleVisitor<B> for Touch {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let _ = param.val();
        }
    }
    module.visit(&mut Touch);
    module
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::nn::LinearConfig;

    use super::*;

    #[test]
    fn clones_of_a_materialized_module_hold_the_same_values() {
        let device = Default::default();
        let linear = materialize(LinearConfig::new(4, 3).init::<Flex>(&device));
        let copy = linear.clone();
        linear.weight.val().into_data().assert_eq(&copy.weight.val().into_data(), true);
    }
}
