//! Progress displays of `megagraph train`: the data preparation's bars and a bar (or line) per
//! epoch, drawn on stderr.

use std::io::IsTerminal;

use indicatif::ProgressBar;
use megagraph_train::{EpochMetrics, PrepareProgress, TrainObserver};

use super::progress_bar;

/// Progress display: a bar per epoch on a terminal, one plain line per epoch otherwise.
pub(super) struct EpochProgress {
    bar: Option<ProgressBar>,
    terminal: bool,
}

impl EpochProgress {
    pub(super) fn new() -> Self {
        Self {
            bar: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }
}

impl TrainObserver for EpochProgress {
    fn epoch_started(&mut self, epoch: usize, epochs: usize, steps: usize) {
        if self.terminal {
            let bar = progress_bar(steps, "epoch {prefix} [{bar:30}] {pos}/{len} steps {msg}");
            bar.set_prefix(format!("{epoch}/{epochs}"));
            self.bar = Some(bar);
        }
    }

    fn step_finished(&mut self, loss: f64) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("loss {loss:.4}"));
            bar.inc(1);
        }
    }

    fn epoch_finished(&mut self, m: &EpochMetrics, improved: bool) {
        let line = format!(
            "epoch {:>4}  loss {:.4}  train {:.4}  valid {:.4} (loss {:.4})  test {:.4}  lr {:.2e}  {:.2}s{}",
            m.epoch,
            m.loss,
            m.train_accuracy,
            m.valid_accuracy,
            m.valid_loss,
            m.test_accuracy,
            m.learning_rate,
            m.seconds,
            if improved { "  *" } else { "" }
        );
        match self.bar.take() {
            Some(bar) => bar.finish_with_message(line),
            None => eprintln!("{line}"),
        }
    }
}

/// Progress bars of the preparation steps (partitioning, distance indexes), drawn on stderr
/// when it is a terminal.
#[derive(Default)]
pub(super) struct PrepareBars {
    bar: std::sync::Mutex<Option<ProgressBar>>,
}

impl PrepareProgress for PrepareBars {
    fn start(&self, step: &str, total: usize, unit: &str) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let template = format!(
            "{{prefix:>16}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{elapsed}}, eta {{eta}})"
        );
        let bar = progress_bar(total, &template);
        bar.set_prefix(step.to_string());
        if let Ok(mut slot) = self.bar.lock() {
            *slot = Some(bar);
        }
    }

    fn advance(&self, done: usize) {
        if let Ok(slot) = self.bar.lock()
            && let Some(bar) = slot.as_ref()
        {
            bar.inc(done as u64);
        }
    }

    fn finish(&self) {
        if let Ok(mut slot) = self.bar.lock()
            && let Some(bar) = slot.take()
        {
            bar.finish_and_clear();
        }
    }
}
