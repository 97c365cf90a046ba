//! The front door: [`plan`], [`plan_analytic`] and [`evaluate`], with one error type,
//! [`PlanError`]. Profile → model → search happens behind these functions.

use crate::cluster::{ClusterError, ClusterSpec};
use crate::cost::CostModel;
use crate::fitted::{FitProfileError, FittedProfile};
use crate::latency::FitOptions;
use crate::memory::{MemoryBreakdown, MemoryModel};
use crate::mesh::CandidateMesh;
use crate::plan::Plan;
use crate::profile::{ProfileError, ProfileLadder, ProfileTable, analytic_profile};
use crate::report::PlanReport;
use crate::search::{SearchError, search};
use crate::search_options::SearchOptions;
use crate::workload::{ModelShape, Workload, WorkloadError};
use megagraph_layout::{ParallelConfig, ParallelConfigError};
use std::time::Instant;

/// Why planning failed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The model shape or workload is invalid.
    #[error("invalid model or workload: {0}")]
    Workload(#[from] WorkloadError),
    /// The cluster file or a sub-cluster is invalid.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The profile is invalid or cannot be built.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The profile cannot be fitted.
    #[error(transparent)]
    Fit(#[from] FitProfileError),
    /// The profile was measured for another model shape or element size.
    #[error("profile {found} does not match the model (expected shape/dtype of {expected})")]
    ProfileMismatch {
        /// Cache key the model would have (backend and device from the profile).
        expected: String,
        /// The profile's cache key.
        found: String,
    },
    /// An analytic profile was requested for a cluster without `[compute]` hints.
    #[error("cluster `{cluster}` has no [compute] hints: add peak_flops etc. or measure a profile")]
    MissingComputeHints {
        /// Name of the cluster.
        cluster: String,
    },
    /// The configuration to evaluate is invalid.
    #[error("invalid parallel configuration: {0}")]
    Config(#[from] ParallelConfigError),
    /// No plan was found.
    #[error(transparent)]
    Search(#[from] SearchError),
}

/// The prediction for one given configuration (see [`evaluate`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The configuration as a plan with its predictions.
    pub plan: Plan,
    /// Seconds per micro-batch of each stage.
    pub stage_seconds: Vec<f64>,
    /// Memory of one device of each stage.
    pub memory: Vec<MemoryBreakdown>,
    /// Usable bytes per device (device memory times [`SearchOptions::memory_fraction`]).
    pub memory_limit_bytes: u64,
    /// Whether every stage fits in the usable memory.
    pub fits: bool,
}

/// Builds the cost model of `shape` training on `workload` on `cluster` from `profile`.
pub(crate) fn cost_model(
    cluster: &ClusterSpec,
    shape: &ModelShape,
    workload: &Workload,
    profile: &ProfileTable,
    options: &SearchOptions,
) -> Result<CostModel, PlanError> {
    shape.validate()?;
    workload.validate()?;
    if !profile.key.fits(shape, workload.dtype_bytes) {
        let expected = crate::profile::ProfileKey::new(
            profile.key.backend.clone(),
            profile.key.device.clone(),
            shape,
            workload.dtype_bytes,
        );
        return Err(PlanError::ProfileMismatch {
            expected: expected.cache_key(),
            found: profile.key.cache_key(),
        });
    }
    let fitted = FittedProfile::fit(profile, &options.fit)?;
    Ok(CostModel::new(
        shape.clone(),
        workload.clone(),
        cluster.clone(),
        fitted,
    ))
}

/// Plans `shape` training on `workload` over all devices of `cluster`, with times and activation
/// sizes from `profile`. `search_seconds` includes fitting the profile.
pub fn plan(
    cluster: &ClusterSpec,
    shape: &ModelShape,
    workload: &Workload,
    profile: &ProfileTable,
    options: &SearchOptions,
) -> Result<PlanReport, PlanError> {
    let started = Instant::now();
    let model = cost_model(cluster, shape, workload, profile, options)?;
    let mut report = search(&model, options)?;
    report.search_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The analytic profile of `shape` on `cluster`'s devices (from its `[compute]` hints) at the
/// default ladder.
pub fn cluster_analytic_profile(
    cluster: &ClusterSpec,
    shape: &ModelShape,
    dtype_bytes: usize,
) -> Result<ProfileTable, PlanError> {
    let hints = cluster
        .compute
        .as_ref()
        .ok_or_else(|| PlanError::MissingComputeHints {
            cluster: cluster.name.clone(),
        })?;
    Ok(analytic_profile(
        hints,
        &cluster.device,
        shape,
        dtype_bytes,
        &ProfileLadder::default(),
    )?)
}

/// [`plan`] with an [analytic profile](crate::profile::analytic_profile) from the cluster's
/// compute hints, for clusters that cannot be measured here.
pub fn plan_analytic(
    cluster: &ClusterSpec,
    shape: &ModelShape,
    workload: &Workload,
    options: &SearchOptions,
) -> Result<PlanReport, PlanError> {
    let profile = cluster_analytic_profile(cluster, shape, workload.dtype_bytes)?;
    plan(cluster, shape, workload, &profile, options)
}

/// Predicts one given configuration (e.g. a naive uniform split to compare with the plan) on the
/// first `config.world_size()` devices of `cluster`.
pub fn evaluate(
    cluster: &ClusterSpec,
    shape: &ModelShape,
    workload: &Workload,
    profile: &ProfileTable,
    config: &ParallelConfig,
    options: &SearchOptions,
) -> Result<Evaluation, PlanError> {
    config.validate(shape.layers, workload.seq_len, workload.sequences_per_step)?;
    config.validate_heads(shape.heads)?;
    config.validate_dense_bias(shape.edge_feature_dim > 0)?;
    let cluster = cluster.first_devices(config.world_size())?;
    let model = cost_model(&cluster, shape, workload, profile, options)?;
    let mesh = CandidateMesh::of(config);
    let estimate = model.candidate(mesh).estimate(&config.stage_layers);
    let limit = (cluster.memory_bytes_per_device as f64 * options.memory_fraction.clamp(0.0, 1.0))
        .floor() as u64;
    Ok(Evaluation {
        plan: Plan::from_estimate(&mesh, config.stage_layers.clone(), &estimate),
        fits: estimate.peak_bytes <= limit,
        stage_seconds: estimate.stage_seconds,
        memory: estimate.memory,
        memory_limit_bytes: limit,
    })
}

/// The memory of one device of each stage of `config`, predicted from `profile` for `shape`
/// training on `workload` (profile fitted with `fit`). Memory does not depend on the cluster's
/// links, so no cluster is needed; [`evaluate`] gives the same breakdowns with the times.
///
/// # Errors
///
/// [`PlanError`]: an invalid shape, workload or configuration, or a profile that does not fit
/// the shape or cannot be fitted.
pub fn predict_memory(
    shape: &ModelShape,
    workload: &Workload,
    profile: &ProfileTable,
    config: &ParallelConfig,
    fit: &FitOptions,
) -> Result<Vec<MemoryBreakdown>, PlanError> {
    shape.validate()?;
    workload.validate()?;
    config.validate(shape.layers, workload.seq_len, workload.sequences_per_step)?;
    config.validate_heads(shape.heads)?;
    config.validate_dense_bias(shape.edge_feature_dim > 0)?;
    let fitted = FittedProfile::fit(profile, fit)?;
    let mesh = CandidateMesh::of(config);
    let model = MemoryModel::new(shape, workload, &fitted, &mesh);
    Ok(config
        .stage_layers
        .iter()
        .enumerate()
        .map(|(stage, &layers)| model.stage(stage, layers))
        .collect())
}
