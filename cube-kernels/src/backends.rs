//! The CubeCL backends that run the attention op as this crate's kernels (features `wgpu` /
//! `cuda`), and their runtimes.
//!
//! These plain backends launch the blockwise kernels, forward and backward. Burn's public `Wgpu`
//! and `Cuda` types wrap them in `Fusion` (with Burn's default features), which runs the same
//! kernels: each pass of the op is one custom fusion operation that calls the inner backend.

/// The CubeCL runtime of [`WgpuKernels`].
#[cfg(feature = "wgpu")]
pub use burn::backend::wgpu::WgpuRuntime;

/// The CubeCL runtime of [`CudaKernels`].
#[cfg(feature = "cuda")]
pub use burn_cubecl::cubecl::cuda::CudaRuntime;

/// Burn's CubeCL backend on wgpu (Vulkan, Metal, DirectX, or OpenGL), `f32` floats.
#[cfg(feature = "wgpu")]
pub type WgpuKernels = burn_cubecl::CubeBackend<WgpuRuntime, f32, i32, u32>;

/// Burn's CubeCL backend on CUDA, `f32` floats.
#[cfg(feature = "cuda")]
pub type CudaKernels = burn_cubecl::CubeBackend<CudaRuntime, f32, i32, u8>;

/// Split-K of the kernels' forward pass: the target of cubes below which the keys are split
/// over several cubes and merged by log-sum-exp.
pub use crate::cube::split_k::{DEFAULT_SPLIT_K_TARGET_CUBES, set_split_k_target_cubes};
