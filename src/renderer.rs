//! [`ProgressRenderer`]: a compact burn-train renderer with a progress bar per epoch (the
//! terminal side of [`MegaGraphTrainer`](crate::train::MegaGraphTrainer); the training library
//! itself draws nothing).

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;

use megagraph_train::burn_train::metric::{MetricDefinition, MetricId, NumericEntry};
use megagraph_train::burn_train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use indicatif::{ProgressBar, ProgressStyle};

/// A burn-train renderer for terminals and logs: a progress bar per training and validation
/// epoch (on stderr, when it is a terminal) and one line per epoch with the epoch mean of every
/// numeric metric, e.g. `epoch 3/10  train Loss 0.8123  valid Loss 0.9012 Accuracy 71.20`.
///
/// Use it with `SupervisedTraining::renderer(ProgressRenderer::new())` in place of Burn's
/// default, which prints a debug line per batch without its `tui` feature.
#[derive(Default)]
pub struct ProgressRenderer {
    names: HashMap<MetricId, String>,
    train: BTreeMap<String, (f64, f64)>,
    valid: BTreeMap<String, (f64, f64)>,
    epoch: Option<(usize, usize)>,
    bar: Option<(bool, ProgressBar)>,
}

impl ProgressRenderer {
    /// A renderer with nothing shown yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn record(&mut self, valid: bool, state: MetricState) {
        let MetricState::Numeric(entry, value) = state else { return };
        let Some(name) = self.names.get(&entry.metric_id).cloned() else { return };
        let (value, count) = match value {
            NumericEntry::Value(value) => (value, 1.0),
            NumericEntry::Aggregated {
                aggregated_value,
                count,
            } => (aggregated_value, count as f64),
        };
        let sums = if valid { &mut self.valid } else { &mut self.train };
        let slot = sums.entry(name).or_insert((0.0, 0.0));
        slot.0 += value * count;
        slot.1 += count;
    }

    /// Prints the line of the finished epoch and starts counting the next one.
    fn epoch_changed(&mut self, global: (usize, usize)) {
        if self.epoch == Some(global) {
            return;
        }
        self.summary();
        self.epoch = Some(global);
    }

    fn summary(&mut self) {
        self.finish_bar();
        let Some((epoch, epochs)) = self.epoch else { return };
        let means = |sums: &BTreeMap<String, (f64, f64)>| -> String {
            sums.iter()
                .filter(|(_, (_, count))| *count > 0.0)
                .map(|(name, (sum, count))| format!(" {name} {:.4}", sum / count))
                .collect()
        };
        let (train, valid) = (means(&self.train), means(&self.valid));
        if !train.is_empty() || !valid.is_empty() {
            eprintln!("epoch {epoch}/{epochs}  train{train}  valid{valid}");
        }
        self.train.clear();
        self.valid.clear();
    }

    fn show(&mut self, valid: bool, item: &TrainingProgress) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let Some(progress) = &item.progress else { return };
        if self.bar.as_ref().is_none_or(|(is_valid, _)| *is_valid != valid) {
            self.finish_bar();
            let bar = ProgressBar::new(progress.items_total as u64);
            let template = if valid {
                "  valid {prefix} [{bar:30}] {pos}/{len} sequences"
            } else {
                "  train {prefix} [{bar:30}] {pos}/{len} sequences"
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_prefix(format!("{}/{}", item.global_progress.items_processed, item.global_progress.items_total));
            self.bar = Some((valid, bar));
        }
        if let Some((_, bar)) = &self.bar {
            bar.set_length(progress.items_total as u64);
            bar.set_position(progress.items_processed as u64);
        }
    }

    fn finish_bar(&mut self) {
        if let Some((_, bar)) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl MetricsRendererTraining for ProgressRenderer {
    fn update_train(&mut self, state: MetricState) {
        self.record(false, state);
    }

    fn update_valid(&mut self, state: MetricState) {
        self.record(true, state);
    }

    fn render_train(&mut self, item: TrainingProgress, _progress_indicators: Vec<ProgressType>) {
        let global = (item.global_progress.items_processed, item.global_progress.items_total);
        self.epoch_changed(global);
        self.show(false, &item);
    }

    fn render_valid(&mut self, item: TrainingProgress, _progress_indicators: Vec<ProgressType>) {
        self.show(true, &item);
    }

    fn on_train_end(&mut self, summary: Option<megagraph_train::burn_train::LearnerSummary>) -> Result<(), Box<dyn std::error::Error>> {
        self.summary();
        self.epoch = None;
        if let Some(summary) = summary {
            eprintln!("{summary}");
        }
        Ok(())
    }
}

impl MetricsRendererEvaluation for ProgressRenderer {
    fn update_test(&mut self, _name: EvaluationName, state: MetricState) {
        self.record(true, state);
    }

    fn render_test(&mut self, item: EvaluationProgress, _progress_indicators: Vec<ProgressType>) {
        self.show(true, &TrainingProgress::from(&item));
    }
}

impl MetricsRenderer for ProgressRenderer {
    fn manual_close(&mut self) {
        self.finish_bar();
    }

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id, definition.name);
    }
}
