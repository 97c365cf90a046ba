//! The CubeCL memory meter on wgpu (Mesa's llvmpipe renders on the CPU): it sees a tensor's
//! bytes come and go on the calling thread's stream, each thread apart.
//!
//! `cargo test --release --features wgpu --test cube_memory`
#![cfg(feature = "wgpu")]

use std::sync::OnceLock;

use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, graphics::OpenGl, init_setup};
use burn::tensor::{Tensor, backend::Backend};
use megagraph_kernels::backends::WgpuKernels;
use megagraph_parallel::MemoryMeter;
use megagraph_parallel::meter::WgpuMemoryMeter;

type B = WgpuKernels;

fn device() -> WgpuDevice {
    static SETUP: OnceLock<()> = OnceLock::new();
    SETUP.get_or_init(|| {
        init_setup::<OpenGl>(&WgpuDevice::Cpu, RuntimeOptions::default());
    });
    WgpuDevice::Cpu
}

/// `[rows, 1024]` f32 random values: `rows * 4 KiB`.
fn tensor(rows: usize, device: &WgpuDevice) -> Tensor<B, 2> {
    Tensor::random([rows, 1024], burn::tensor::Distribution::Default, device)
}

#[test]
fn meter_sees_a_tensor_come_and_go() {
    let device = device();
    let meter = WgpuMemoryMeter::new(&device);
    assert!(meter.available());
    B::sync(&device).unwrap();
    let base = meter.reset_peak();
    let big = tensor(1024, &device); // 4 MiB
    B::sync(&device).unwrap();
    let with_big = meter.peak();
    assert!(
        with_big >= base + (4 << 20),
        "4 MiB tensor: base {base}, peak {with_big}"
    );
    drop(big);
    B::sync(&device).unwrap();
    // the peak stays until the next reset, which starts at the bytes in use now
    assert_eq!(meter.peak(), with_big);
    let after = meter.reset_peak();
    assert!(after < with_big, "after the drop {after} vs {with_big}");
    assert_eq!(meter.peak(), after);
}

#[test]
fn each_thread_is_measured_apart() {
    let device = device();
    let meter = WgpuMemoryMeter::new(&device);
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| {
            let held = tensor(2048, &device); // 8 MiB on this thread's stream
            B::sync(&device).unwrap();
            let seen = meter.peak();
            (held, seen)
        });
        let (held, seen) = holder.join().unwrap();
        assert!(seen >= 8 << 20, "the holding thread sees its 8 MiB: {seen}");
        // this thread's stream did not grow by the other thread's tensor
        let mine = meter.reset_peak();
        assert!(
            mine < 8 << 20,
            "another thread's tensor counted here: {mine}"
        );
        drop(held);
    });
}
