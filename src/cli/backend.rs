//! `--backend`: which Burn backend a command runs on.

use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use clap::ValueEnum;
use megagraph_parallel::{ContextParallelBackend, MemoryMeter, ThreadAllocatorMeter};

use super::error::{CliError, Result};

/// A Burn backend of the command line. `wgpu` and `cuda` exist in builds with the feature of
/// the same name and run the attention op as megagraph's CubeCL kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// Burn's Flex CPU backend (always built).
    #[default]
    Flex,
    /// CubeCL on wgpu: Vulkan, Metal, DirectX or OpenGL (build with `--features wgpu`).
    Wgpu,
    /// CubeCL on CUDA (build with `--features cuda`).
    Cuda,
}

/// Work generic over the backend, run by [`BackendChoice::run`].
pub trait BackendJob {
    /// What the job returns.
    type Output;

    /// Runs on backend `B` at `devices` (at least one; see [`BackendChoice::run_on`]); `meter`
    /// measures the first device's memory per thread.
    fn run<B: ContextParallelBackend>(
        self,
        backend: BackendChoice,
        devices: Vec<B::Device>,
        meter: Arc<dyn MemoryMeter>,
    ) -> Result<Self::Output>;
}

impl BackendChoice {
    /// The name in profile keys and messages: `flex`, `wgpu` or `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Flex => "flex",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
        }
    }

    /// Whether the backend computes on this machine's CPU cores, which a mesh's ranks share
    /// (Flex; wgpu may, on a software renderer, but is treated as a GPU).
    pub fn is_cpu(self) -> bool {
        self == Self::Flex
    }

    /// `Ok` when this build has the backend.
    ///
    /// # Errors
    ///
    /// [`CliError::InvalidFlag`] naming `backend` and the feature to build with.
    pub fn check(self) -> Result<()> {
        let built = match self {
            Self::Flex => true,
            Self::Wgpu => cfg!(feature = "wgpu"),
            // `cuda` (with Burn's autotuner) turns on `cuda-untuned` (the backend itself)
            Self::Cuda => cfg!(feature = "cuda-untuned"),
        };
        if built { Ok(()) } else { Err(self.not_built()) }
    }

    /// Runs `job` on this backend's autodiff type, its default device and its memory meter.
    ///
    /// # Errors
    ///
    /// [`CliError::InvalidFlag`] naming `backend` when this build lacks its feature, or
    /// the job's error.
    pub fn run<J: BackendJob>(self, job: J) -> Result<J::Output> {
        self.run_on(1, job)
    }

    /// Runs `job` on this backend with `gpus` devices: CUDA devices `0..gpus`, or the default
    /// wgpu adapter (one) or the first `gpus` discrete GPUs. Flex has one device: its ranks are
    /// threads of this machine.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run); `gpus = 0`, or more than one on flex, is refused naming the
    /// field `devices`.
    pub fn run_on<J: BackendJob>(self, gpus: usize, job: J) -> Result<J::Output> {
        if gpus == 0 {
            return Err(CliError::InvalidFlag {
                flag: "devices",
                reason: "must be at least 1".into(),
            });
        }
        if gpus > 1 && self == Self::Flex {
            return Err(CliError::InvalidFlag {
                flag: "devices",
                reason: format!(
                    "{gpus} devices on flex: its ranks are threads sharing this machine's CPU \
                     (one device); --devices counts GPUs of --backend cuda or wgpu"
                ),
            });
        }
        match self {
            Self::Flex => job.run::<Autodiff<Flex>>(
                self,
                vec![Default::default()],
                Arc::new(ThreadAllocatorMeter),
            ),
            Self::Wgpu => self.run_wgpu(gpus, job),
            Self::Cuda => self.run_cuda(gpus, job),
        }
    }

    #[cfg(feature = "wgpu")]
    fn run_wgpu<J: BackendJob>(self, gpus: usize, job: J) -> Result<J::Output> {
        use burn::backend::wgpu::WgpuDevice;
        use megagraph_kernels::backends::WgpuKernels;
        use megagraph_parallel::meter::WgpuMemoryMeter;
        let devices = if gpus == 1 {
            vec![wgpu_device(WgpuDevice::DefaultDevice)?]
        } else {
            (0..gpus)
                .map(|index| wgpu_device(WgpuDevice::DiscreteGpu(index)))
                .collect::<Result<Vec<_>>>()?
        };
        let meter = Arc::new(WgpuMemoryMeter::new(&devices[0]));
        job.run::<Autodiff<WgpuKernels>>(self, devices, meter)
    }

    #[cfg(not(feature = "wgpu"))]
    fn run_wgpu<J: BackendJob>(self, _gpus: usize, _job: J) -> Result<J::Output> {
        Err(self.not_built())
    }

    #[cfg(feature = "cuda-untuned")]
    fn run_cuda<J: BackendJob>(self, gpus: usize, job: J) -> Result<J::Output> {
        use burn::backend::cuda::CudaDevice;
        use megagraph_kernels::backends::CudaKernels;
        use megagraph_parallel::meter::CudaMemoryMeter;
        let devices: Vec<CudaDevice> = (0..gpus).map(CudaDevice::new).collect();
        let meter = Arc::new(CudaMemoryMeter::new(&devices[0]));
        job.run::<Autodiff<CudaKernels>>(self, devices, meter)
    }

    #[cfg(not(feature = "cuda-untuned"))]
    fn run_cuda<J: BackendJob>(self, _gpus: usize, _job: J) -> Result<J::Output> {
        Err(self.not_built())
    }

    fn not_built(self) -> CliError {
        CliError::InvalidFlag {
            flag: "backend",
            reason: format!(
                "`{0}`: this megagraph was built without the `{0}` feature; rebuild with \
                 `cargo build --release --features {0}`",
                self.name()
            ),
        }
    }
}

/// `device` set up with the platform's preferred graphics API or, where that has no adapter
/// (e.g. a machine without Vulkan), with OpenGL (Mesa's llvmpipe renders on the CPU).
#[cfg(feature = "wgpu")]
fn wgpu_device(device: burn::backend::wgpu::WgpuDevice) -> Result<burn::backend::wgpu::WgpuDevice> {
    use burn::backend::wgpu::graphics::{AutoGraphicsApi, OpenGl};
    use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, init_setup};
    use std::panic::{AssertUnwindSafe, catch_unwind};

    // wgpu reports a missing adapter by panicking; keep its message off the terminal
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    let setups: [(&str, fn(&WgpuDevice)); 2] = [
        ("the default graphics API", |d| {
            init_setup::<AutoGraphicsApi>(d, RuntimeOptions::default());
        }),
        ("OpenGL", |d| {
            init_setup::<OpenGl>(d, RuntimeOptions::default());
        }),
    ];
    let mut ready = false;
    for (api, setup) in setups {
        match catch_unwind(AssertUnwindSafe(|| setup(&device))) {
            Ok(()) => {
                ready = true;
                break;
            }
            Err(panic) => failures.push(format!(
                "{api}: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
    }
    std::panic::set_hook(hook);
    if ready {
        Ok(device)
    } else {
        Err(CliError::InvalidFlag {
            flag: "backend",
            reason: format!(
                "`wgpu`: no graphics adapter for {device:?} ({})",
                failures.join("; ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Name;

    impl BackendJob for Name {
        type Output = String;

        fn run<B: ContextParallelBackend>(
            self,
            backend: BackendChoice,
            _devices: Vec<B::Device>,
            _meter: Arc<dyn MemoryMeter>,
        ) -> Result<String> {
            Ok(format!("{} {}", backend.name(), std::any::type_name::<B>()))
        }
    }

    #[test]
    fn flex_runs_the_job_on_flex() {
        let ran = BackendChoice::Flex.run(Name).unwrap();
        assert!(ran.starts_with("flex ") && ran.contains("Flex"), "{ran}");
    }

    #[test]
    fn devices_are_counted_on_gpus_only() {
        for gpus in [0, 2] {
            let error = BackendChoice::Flex
                .run_on(gpus, Name)
                .unwrap_err()
                .to_string();
            assert!(error.contains("devices"), "{error}");
        }
    }

    #[cfg(not(feature = "cuda-untuned"))]
    #[test]
    fn a_backend_not_built_is_a_clear_error() {
        let error = BackendChoice::Cuda.run(Name).unwrap_err().to_string();
        assert!(
            error.contains("backend") && error.contains("--features cuda"),
            "{error}"
        );
    }
}
