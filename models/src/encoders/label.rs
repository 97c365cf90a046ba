use burn::config::Config;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::tensor::{Int, Tensor, backend::Backend};

/// Configuration of a [`LabelEncoding`].
#[derive(Config, Debug)]
pub struct LabelEncodingConfig {
    /// Model width.
    pub d_model: usize,
    /// Number of classes; the class index `num_classes` means "no label shown".
    pub num_classes: usize,
}

/// UniMP's label input (Shi et al. 2021, masked label prediction): a learned embedding of the
/// class shown for a node, added to its input representation, with one more learned row for
/// nodes whose label is not shown. While training, a random part of the training nodes show
/// their label and the loss is taken on the others; at evaluation every training node shows
/// its label, so attention can read the labels of the nodes a prediction attends to.
#[derive(Module, Debug)]
pub struct LabelEncoding<B: Backend> {
    /// Class embeddings, `[num_classes + 1, d_model]`; the last row is "no label shown".
    pub embedding: Embedding<B>,
    /// Number of classes (the index of the "no label shown" row).
    pub num_classes: usize,
}

impl LabelEncodingConfig {
    /// Initializes a [`LabelEncoding`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> LabelEncoding<B> {
        LabelEncoding {
            embedding: EmbeddingConfig::new(self.num_classes + 1, self.d_model)
                .with_initializer(Initializer::Normal { mean: 0.0, std: 0.02 })
                .init(device),
            num_classes: self.num_classes,
        }
    }
}

impl<B: Backend> LabelEncoding<B> {
    /// Label embeddings of the classes `shown`; an index outside `0..num_classes` (by
    /// convention `num_classes`) reads the "no label shown" row.
    ///
    /// - `shown`: `[batch, seq]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, shown: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let unknown = self.num_classes as i64;
        let outside = shown.clone().lower_elem(0).bool_or(shown.clone().greater_equal_elem(unknown));
        self.embedding.forward(shown.mask_fill(outside, unknown))
    }

    /// The embeddings of a batch without shown labels: the "no label shown" row at every
    /// position of `[batch, seq]`.
    pub fn unknown(&self, [batch, seq]: [usize; 2], device: &B::Device) -> Tensor<B, 3> {
        self.forward(Tensor::full([batch, seq], self.num_classes as i64, device))
    }
}
