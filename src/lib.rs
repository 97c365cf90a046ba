#![warn(missing_docs)]
//! # megagraph
//!
//! Graph Transformers on graphs too large for one device, on [Burn](https://burn.dev).
//!
//! This facade re-exports the workspace crates:
//!
//! - [`graph`]: graphs, the OGB-layout loader, synthetic graphs, node sequences, distance indexes;
//! - [`kernels`]: the exact blockwise biased attention op with LSE;
//! - [`models`]: Graphormer-style Graph Transformer modules;
//! - [`layout`]: the pp×cp×dp layout of a run and the 1F1B pipeline order;
//! - [`parallel`]: the pp×cp×dp device mesh;
//! - [`planner`]: Model → Search of parallel plans (pure: no Burn runtime);
//! - [`calibrate`]: the planner's measuring edge: profiler, plan validation, runtime overhead;
//! - [`train`]: training and configuration; with Burn's own training loop,
//!   [`train::MegaGraphTrainer`] (a burn-train learning strategy; see [`train::learner`] and
//!   `examples/custom_learner.rs`).
//!
//! The libraries draw nothing on the terminal: they take progress callbacks
//! ([`train::TrainObserver`], [`train::PrepareProgress`], burn-train's renderers) and return
//! typed errors. This package owns the terminal: [`ProgressRenderer`] (progress bars for
//! burn-train) and the `megagraph` binary (its command line, `src/cli/`).
//!
//! Training from Rust:
//!
//! ```no_run
//! use burn::backend::{Autodiff, Flex};
//! use megagraph::train::{NodeClassificationTrainer, Quiet, TrainConfig, prepare};
//!
//! let mut config = TrainConfig::default(); // the built-in synthetic graph
//! config.data.dataset = Some("../shared/datasets/cora".into());
//! let data = prepare(&config)?; // load, sequences, distance indexes
//! let outcome = NodeClassificationTrainer::new(&config, data)
//!     .fit::<Autodiff<Flex>>(&Default::default(), &mut Quiet)?;
//! println!("test accuracy {:.3}", outcome.report.test_accuracy);
//! let model = outcome.model; // a Burn module: GraphTransformer<Flex>
//! # Ok::<(), megagraph::train::TrainError>(())
//! ```

pub use megagraph_calibrate as calibrate;
pub use megagraph_graph as graph;
pub use megagraph_kernels as kernels;
pub use megagraph_layout as layout;
pub use megagraph_models as models;
pub use megagraph_parallel as parallel;
pub use megagraph_planner as planner;
pub use megagraph_temporal as temporal;
pub use megagraph_train as train;

mod renderer;

pub use renderer::ProgressRenderer;

/// The README's code blocks, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
