use burn::config::Config;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Initializer};
use burn::tensor::{Int, Tensor, backend::Backend};

/// Configuration of a [`CentralityEncoding`].
#[derive(Config, Debug)]
pub struct CentralityEncodingConfig {
    /// Model width.
    pub d_model: usize,
    /// Degrees above this value share the embedding of `max_degree`. Default: 64.
    #[config(default = 64)]
    pub max_degree: usize,
}

/// Graphormer's centrality encoding: learned embeddings of a node's in- and out-degree, added to
/// its input representation.
#[derive(Module, Debug)]
pub struct CentralityEncoding<B: Backend> {
    /// In-degree embeddings, `[max_degree + 1, d_model]`.
    pub in_degree: Embedding<B>,
    /// Out-degree embeddings, `[max_degree + 1, d_model]`.
    pub out_degree: Embedding<B>,
    /// The clamp applied to degrees.
    pub max_degree: usize,
}

impl CentralityEncodingConfig {
    /// Initializes a [`CentralityEncoding`] on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> CentralityEncoding<B> {
        let embedding = || {
            EmbeddingConfig::new(self.max_degree + 1, self.d_model)
                .with_initializer(Initializer::Normal { mean: 0.0, std: 0.02 })
                .init(device)
        };
        CentralityEncoding {
            in_degree: embedding(),
            out_degree: embedding(),
            max_degree: self.max_degree,
        }
    }
}

impl<B: Backend> CentralityEncoding<B> {
    /// Degree embeddings.
    ///
    /// - `in_degree`, `out_degree`: `[batch, seq]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, in_degree: Tensor<B, 2, Int>, out_degree: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let max = self.max_degree as i64;
        self.in_degree.forward(in_degree.clamp(0, max)) + self.out_degree.forward(out_degree.clamp(0, max))
    }
}
