//! [`Machine`]: this machine as a cluster, for `plan = "auto"` without a cluster file: its CPU
//! cores as workers that share its memory.

use megagraph_planner::{ClusterSpec, PlanError};

/// One CPU worker's link and roofline hints (`configs/clusters/cpu-local.toml`); its device
/// count and memory are replaced by this machine's.
const CPU_WORKER_CLUSTER: &str = include_str!("../../../../configs/clusters/cpu-local.toml");

/// What planning needs to know of the machine a run starts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// CPU cores this process may use (one worker each).
    pub cores: usize,
    /// Physical memory in bytes; `None` where it cannot be read.
    pub memory_bytes: Option<u64>,
}

impl Machine {
    /// This machine: the cores this process may use (`available_parallelism`) and, on Linux,
    /// the `MemTotal` of `/proc/meminfo`.
    pub fn detect() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| mem_total_bytes(&text));
        Self {
            cores,
            memory_bytes,
        }
    }

    /// The machine as a one-node cluster of `cores` CPU workers, each planning with an equal
    /// share of the memory (without a known memory size: the share of `cpu-local.toml`).
    ///
    /// # Errors
    ///
    /// [`PlanError`] only if the built-in worker description does not parse.
    pub fn cluster(&self) -> Result<ClusterSpec, PlanError> {
        let mut cluster = ClusterSpec::from_toml_str(CPU_WORKER_CLUSTER, "built-in cpu-local.toml")?;
        let cores = self.cores.max(1);
        cluster.devices_per_node = cores;
        match self.memory_bytes {
            Some(bytes) => cluster.memory_bytes_per_device = bytes / cores as u64,
            None => log::warn!(
                "the memory of this machine is unknown: planning with {} bytes per CPU worker",
                cluster.memory_bytes_per_device
            ),
        }
        cluster.name = format!("this machine ({cores} CPU workers)");
        Ok(cluster)
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_the_total_in_bytes() {
        let meminfo = "MemTotal:       24563052 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(24_563_052 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 3 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn the_cluster_is_this_machines_cores_sharing_its_memory() {
        let machine = Machine::detect();
        let expected = std::thread::available_parallelism().map_or(1, |c| c.get());
        assert_eq!(machine.cores, expected);
        let cluster = machine.cluster().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((cluster.nodes, cluster.devices_per_node), (1, expected));
        if let Some(memory) = machine.memory_bytes {
            assert_eq!(cluster.memory_bytes_per_device, memory / expected as u64);
        }

        let sixteen = Machine {
            cores: 16,
            memory_bytes: Some(128 << 30),
        };
        let cluster = sixteen.cluster().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cluster.devices_per_node, 16);
        assert_eq!(cluster.memory_bytes_per_device, 8 << 30);
    }
}
