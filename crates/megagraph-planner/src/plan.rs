//! [`Plan`]: a layout with what the cost model predicts for it and, once it ran, what was
//! measured.

use crate::cost::StepEstimate;
use crate::mesh::CandidateMesh;
use megagraph_layout::ParallelConfig;
use serde::{Deserialize, Serialize};

/// A layout, its prediction and, when it was run, its measurement.
///
/// Serialized flat, with exactly these field names: the layout's (`pp`, `cp`, `dp`,
/// `micro_batches`, `stage_layers`, `cp_mode`), `predicted_step_seconds`,
/// `predicted_peak_bytes_per_device` and `bottleneck`, and when measured
/// `measured_step_seconds` and `measured_peak_bytes_per_device` (that one when memory was
/// counted). A plan file read as a [`ParallelConfig`] takes the layout and ignores the rest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The degrees and the layer split.
    #[serde(flatten)]
    pub layout: ParallelConfig,
    /// What the cost model predicts.
    #[serde(flatten)]
    pub predicted: Prediction,
    /// What was measured when the plan ran (`megagraph-calibrate`'s `validate_plans`);
    /// `None` otherwise.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measurement>,
}

/// What the cost model predicts for a layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Seconds per optimizer step.
    #[serde(rename = "predicted_step_seconds")]
    pub step_seconds: f64,
    /// Peak bytes of the fullest device.
    #[serde(rename = "predicted_peak_bytes_per_device")]
    pub peak_bytes_per_device: u64,
    /// What limits the step, in words.
    pub bottleneck: String,
}

/// What was measured when a layout ran.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Seconds per step (median of the measured steps, after warm-up).
    #[serde(rename = "measured_step_seconds")]
    pub step_seconds: f64,
    /// Peak bytes of the fullest device (the largest per-rank peak of live bytes), when memory
    /// was counted.
    #[serde(
        rename = "measured_peak_bytes_per_device",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub peak_bytes_per_device: Option<u64>,
}

impl Plan {
    /// A plan of `layout` predicted as `predicted`, not measured.
    pub fn predicted(layout: ParallelConfig, predicted: Prediction) -> Self {
        Self {
            layout,
            predicted,
            measured: None,
        }
    }

    /// A plan from a mesh, its split and their estimate.
    pub(crate) fn from_estimate(
        mesh: &CandidateMesh,
        stage_layers: Vec<usize>,
        estimate: &StepEstimate,
    ) -> Self {
        let layout = mesh.layout(stage_layers);
        Self::predicted(
            layout,
            Prediction {
                step_seconds: estimate.step_seconds,
                peak_bytes_per_device: estimate.peak_bytes,
                bottleneck: estimate.bottleneck.clone(),
            },
        )
    }

    /// The plan's layout, cloned (to hand to a trainer).
    pub fn to_parallel_config(&self) -> ParallelConfig {
        self.layout.clone()
    }

    /// The measured step seconds, when measured.
    pub fn measured_step_seconds(&self) -> Option<f64> {
        self.measured.map(|m| m.step_seconds)
    }

    /// The measured peak bytes of the fullest device, when measured with memory counted.
    pub fn measured_peak_bytes_per_device(&self) -> Option<u64> {
        self.measured.and_then(|m| m.peak_bytes_per_device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan::predicted(
            ParallelConfig::uniform(2, 1, 2, 4, 5).unwrap(),
            Prediction {
                step_seconds: 1.5,
                peak_bytes_per_device: 1 << 30,
                bottleneck: "compute".into(),
            },
        )
    }

    #[test]
    fn serializes_flat_and_round_trips() {
        let predicted = plan();
        let json = serde_json::to_value(&predicted).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "pp": 2, "cp": 1, "dp": 2, "micro_batches": 4, "stage_layers": [2, 3], "cp_mode": "ring",
                "predicted_step_seconds": 1.5,
                "predicted_peak_bytes_per_device": 1u64 << 30,
                "bottleneck": "compute"
            })
        );
        assert_eq!(serde_json::from_value::<Plan>(json).unwrap(), predicted);
        let measured = Plan {
            measured: Some(Measurement {
                step_seconds: 1.25,
                peak_bytes_per_device: None,
            }),
            ..plan()
        };
        let json = serde_json::to_value(&measured).unwrap();
        assert_eq!(json["measured_step_seconds"], 1.25);
        assert!(json.get("measured_peak_bytes_per_device").is_none());
        assert_eq!(serde_json::from_value::<Plan>(json).unwrap(), measured);
        assert_eq!(measured.measured_step_seconds(), Some(1.25));
        assert_eq!(measured.measured_peak_bytes_per_device(), None);
    }
}
