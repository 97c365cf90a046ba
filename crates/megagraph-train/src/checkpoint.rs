use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Record, Recorder};
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use crate::beta::BetaTuner;
use crate::error::{Result, TrainError};
use crate::files::write_atomically;
use crate::metrics::EpochMetrics;

/// Progress of a run, saved with each checkpoint so `--resume` continues exactly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Epochs completed.
    pub epoch: usize,
    /// Optimizer steps taken.
    pub step: usize,
    /// Epoch of the best validation accuracy (0 = none yet).
    pub best_epoch: usize,
    /// Best validation accuracy so far.
    pub best_valid_accuracy: f64,
    /// Epochs since the best validation accuracy.
    pub epochs_without_improvement: usize,
    /// Seconds spent in completed epochs.
    pub train_seconds: f64,
    /// Metrics of every completed epoch.
    pub history: Vec<EpochMetrics>,
    /// Fingerprint of the configuration that produced the checkpoint.
    pub config_fingerprint: String,
    /// The state of reformation's `β` tuner (`reform_threshold = "tuned"`), so that a resumed
    /// run tunes `β` as an uninterrupted one. Checkpoints written without it read as a fresh
    /// tuner.
    #[serde(default)]
    pub beta_tuner: BetaTuner,
}

impl TrainState {
    /// The state before the first epoch of a run whose configuration has `config_fingerprint`.
    pub(crate) fn fresh(config_fingerprint: String) -> Self {
        Self {
            epoch: 0,
            step: 0,
            best_epoch: 0,
            best_valid_accuracy: f64::NEG_INFINITY,
            epochs_without_improvement: 0,
            train_seconds: 0.0,
            history: Vec::new(),
            config_fingerprint,
            beta_tuner: BetaTuner::default(),
        }
    }
}

/// Writes and reads checkpoints in a directory.
///
/// Each checkpoint is a directory `epoch-NNNNNN/` holding the model, the best-validation model,
/// the optimizer state and a `state.json`. It is written under a temporary name and renamed into
/// place, and only then is the `LATEST` file (itself replaced atomically) pointed at it; older
/// checkpoints are removed afterwards. A crash at any point leaves the previous checkpoint intact.
#[derive(Clone, Debug)]
pub struct Checkpointer {
    dir: PathBuf,
}

type Rec = NamedMpkFileRecorder<FullPrecisionSettings>;

const LATEST: &str = "LATEST";

impl Checkpointer {
    /// A checkpointer writing into `dir` (created when needed).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn error(&self, path: &Path, message: impl std::fmt::Display) -> TrainError {
        TrainError::Checkpoint {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }

    /// Saves a checkpoint after `state.epoch` epochs: the current parameters `model`, the
    /// best-validation parameters `best` and the optimizer state `optimizer` (a record over the
    /// autodiff backend `B`, e.g. `Optimizer::to_record`).
    pub fn save<B, M, R>(&self, model: &M, best: &M, optimizer: R, state: &TrainState) -> Result<()>
    where
        B: AutodiffBackend,
        M: Module<B::InnerBackend>,
        R: Record<B>,
    {
        self.save_with::<B, M, R, TrainState>(state.epoch, model, best, optimizer, state, |_| Ok(()))
    }

    /// Saves a checkpoint after `epoch` epochs with a state of any serializable type `S`
    /// (`state.json`), plus whatever `extra` writes into the checkpoint's directory before it is
    /// committed (a temporal model's node memory, say). Atomic like [`save`](Self::save).
    pub fn save_with<B, M, R, S>(
        &self,
        epoch: usize,
        model: &M,
        best: &M,
        optimizer: R,
        state: &S,
        extra: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<()>
    where
        B: AutodiffBackend,
        M: Module<B::InnerBackend>,
        R: Record<B>,
        S: Serialize,
    {
        let name = format!("epoch-{epoch:06}");
        let final_dir = self.dir.join(&name);
        let tmp_dir = self.dir.join(format!("{name}.tmp"));
        let io = |path: &Path, err: std::io::Error| self.error(path, err);
        if tmp_dir.exists() {
            std::fs::remove_dir_all(&tmp_dir).map_err(|e| io(&tmp_dir, e))?;
        }
        std::fs::create_dir_all(&tmp_dir).map_err(|e| io(&tmp_dir, e))?;
        let recorder = Rec::new();
        model
            .clone()
            .save_file(tmp_dir.join("model"), &recorder)
            .map_err(|e| self.error(&tmp_dir.join("model.mpk"), e))?;
        best.clone()
            .save_file(tmp_dir.join("best"), &recorder)
            .map_err(|e| self.error(&tmp_dir.join("best.mpk"), e))?;
        Recorder::<B>::record(&recorder, optimizer, tmp_dir.join("optimizer"))
            .map_err(|e| self.error(&tmp_dir.join("optimizer.mpk"), e))?;
        extra(&tmp_dir)?;
        let state_json = serde_json::to_vec_pretty(state).map_err(|e| self.error(&tmp_dir, e))?;
        write_atomically(&tmp_dir.join("state.json"), &state_json)?;
        if final_dir.exists() {
            std::fs::remove_dir_all(&final_dir).map_err(|e| io(&final_dir, e))?;
        }
        std::fs::rename(&tmp_dir, &final_dir).map_err(|e| io(&final_dir, e))?;
        write_atomically(&self.dir.join(LATEST), name.as_bytes())?;
        self.remove_older_than(&name);
        Ok(())
    }

    fn remove_older_than(&self, keep: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("epoch-")
                && name.as_str() != keep
                && let Err(err) = std::fs::remove_dir_all(entry.path())
            {
                log::warn!("cannot remove old checkpoint {}: {err}", entry.path().display());
            }
        }
    }

    /// The state of the latest checkpoint, or `None` when the directory has none.
    pub fn latest_state(&self) -> Result<Option<TrainState>> {
        self.latest_state_as()
    }

    /// The state of the latest checkpoint written by [`save_with`](Self::save_with) with a
    /// state of type `S`, or `None` when the directory has none.
    pub fn latest_state_as<S: serde::de::DeserializeOwned>(&self) -> Result<Option<S>> {
        let Some(dir) = self.latest_dir()? else { return Ok(None) };
        let path = dir.join("state.json");
        let bytes = std::fs::read(&path).map_err(|e| self.error(&path, e))?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| self.error(&path, format!("corrupt state: {e}")))
    }

    /// The directory of the latest checkpoint (where [`save_with`](Self::save_with)'s `extra`
    /// files are), or `None` when there is none.
    pub fn latest_dir(&self) -> Result<Option<PathBuf>> {
        let pointer = self.dir.join(LATEST);
        match std::fs::read_to_string(&pointer) {
            Ok(name) => {
                let name = name.trim();
                if !name.starts_with("epoch-") || name.contains(['/', '\\']) {
                    return Err(self.error(&pointer, format!("does not name a checkpoint: {name:?}")));
                }
                Ok(Some(self.dir.join(name)))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(self.error(&pointer, err)),
        }
    }

    /// Loads the parameters, best parameters and optimizer state of the latest checkpoint into
    /// the given (freshly initialized) modules.
    pub fn load<B, M, R>(&self, model: M, best: M, device: &B::Device) -> Result<(M, M, R)>
    where
        B: AutodiffBackend,
        M: Module<B::InnerBackend>,
        R: Record<B>,
    {
        let dir = self
            .latest_dir()?
            .ok_or_else(|| self.error(&self.dir, "no checkpoint to resume from"))?;
        let recorder = Rec::new();
        let model = model
            .load_file(dir.join("model"), &recorder, device)
            .map_err(|e| self.error(&dir.join("model.mpk"), e))?;
        let best = best
            .load_file(dir.join("best"), &recorder, device)
            .map_err(|e| self.error(&dir.join("best.mpk"), e))?;
        let record = Recorder::<B>::load(&recorder, dir.join("optimizer"), device)
            .map_err(|e| self.error(&dir.join("optimizer.mpk"), e))?;
        Ok((model, best, record))
    }
}
