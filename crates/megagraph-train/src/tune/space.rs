//! [`SearchSpace`]: the hyperparameters to search, read from TOML, and the trials it plans.
//!
//! ```toml
//! [search]
//! strategy = "random"          # or "grid"
//! trials = 20                  # the budget (random: required; grid: the first N grid points)
//! seed = 0                     # the random sampler's seed
//! seeds = 1                    # training seeds per trial; a trial's score is their mean
//!                              # best validation accuracy
//! base = "../train/cora.toml"  # the config the trials change (relative to this file)
//!
//! [params]
//! "optimizer.lr" = { values = [0.001, 0.002, 0.005] }
//! "model.dropout" = { min = 0.1, max = 0.6 }                  # uniform; a grid needs `steps`
//! "optimizer.weight_decay" = { min = 1e-5, max = 1e-2, log = true }
//! "model.layers" = { min = 1, max = 3 }                       # integer bounds: integers
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::error::{TuneError, TuneResult};

/// One trial's parameters: dotted config keys (`optimizer.lr`) and their values.
pub type TrialParams = BTreeMap<String, toml::Value>;

/// The most grid points a grid search may have.
const MAX_GRID: usize = 1_000_000;

/// How the trials are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Independent random draws from every parameter, seeded (`search.seed`).
    #[default]
    Random,
    /// Every combination of the parameters' values, the last key varying fastest.
    Grid,
}

/// The values one parameter may take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Param {
    /// One of these values (any TOML values).
    Choice(Vec<toml::Value>),
    /// A number in `[min, max]`.
    Range {
        /// Lower bound.
        min: f64,
        /// Upper bound (inclusive).
        max: f64,
        /// Draw (or space grid points) uniformly in `ln x` instead of `x`.
        log: bool,
        /// Integer values (both bounds were written as integers).
        integer: bool,
        /// Grid points of a grid search (evenly spaced, ends included).
        steps: Option<usize>,
    },
}

/// A hyperparameter search: the strategy, its budget and the parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchSpace {
    /// How trials are chosen.
    pub strategy: Strategy,
    /// The trial budget (random: the number of draws; grid: at most this many grid points,
    /// in grid order; unset = the whole grid).
    pub trials: Option<usize>,
    /// Seed of the random sampler.
    pub seed: u64,
    /// Training seeds per trial (`training.seed` and the ones after it); a trial scores the
    /// mean of their best validation accuracies.
    pub seeds: usize,
    /// The training config the trials change, resolved against the space file's directory;
    /// unset: the command line's.
    pub base: Option<PathBuf>,
    /// The parameters by dotted config key, in key order.
    pub params: BTreeMap<String, Param>,
}

/// The file's `[search]` table.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct SearchTable {
    strategy: Strategy,
    trials: Option<usize>,
    seed: u64,
    seeds: usize,
    base: Option<PathBuf>,
}

impl Default for SearchTable {
    fn default() -> Self {
        Self {
            strategy: Strategy::default(),
            trials: None,
            seed: 0,
            seeds: 1,
            base: None,
        }
    }
}

/// One entry of the file's `[params]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamTable {
    values: Option<Vec<toml::Value>>,
    min: Option<toml::Value>,
    max: Option<toml::Value>,
    #[serde(default)]
    log: bool,
    steps: Option<usize>,
}

/// The whole file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpaceFile {
    #[serde(default)]
    search: SearchTable,
    params: BTreeMap<String, ParamTable>,
}

impl SearchSpace {
    /// Reads a search space from a TOML file.
    ///
    /// # Errors
    ///
    /// [`TuneError::SpaceRead`], [`TuneError::SpaceParse`] (with line and column) or
    /// [`TuneError::Space`] naming the key.
    pub fn from_toml_file(path: &Path) -> TuneResult<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| TuneError::SpaceRead {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text, path)
    }

    /// Parses a search space; `path` names it in errors and anchors a relative `base`.
    ///
    /// # Errors
    ///
    /// As [`from_toml_file`](Self::from_toml_file).
    pub fn from_toml_str(text: &str, path: &Path) -> TuneResult<Self> {
        let file: SpaceFile = toml::from_str(text).map_err(|err| {
            let location = err
                .span()
                .map(|span| {
                    let line = text[..span.start].matches('\n').count() + 1;
                    let column =
                        span.start - text[..span.start].rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("line {line}, column {column}: ")
                })
                .unwrap_or_default();
            TuneError::SpaceParse {
                path: path.to_path_buf(),
                message: format!("{location}{}", err.message()),
            }
        })?;
        let invalid = |key: &str, reason: &str| TuneError::Space {
            path: path.to_path_buf(),
            key: key.to_string(),
            reason: reason.to_string(),
        };
        let search = file.search;
        if search.seeds == 0 {
            return Err(invalid("search.seeds", "must be at least 1"));
        }
        if search.trials == Some(0) {
            return Err(invalid("search.trials", "must be at least 1"));
        }
        if search.strategy == Strategy::Random && search.trials.is_none() {
            return Err(invalid(
                "search.trials",
                "is required for a random search (the number of draws)",
            ));
        }
        if file.params.is_empty() {
            return Err(invalid("params", "names no parameter: give at least one"));
        }
        let mut params = BTreeMap::new();
        for (key, table) in file.params {
            let param = parse_param(&table)
                .map_err(|reason| invalid(&format!("params.\"{key}\""), &reason))?;
            if search.strategy == Strategy::Grid
                && let Param::Range { steps: None, .. } = param
            {
                return Err(invalid(
                    &format!("params.\"{key}\""),
                    "is a range: a grid search needs its `steps`",
                ));
            }
            params.insert(key, param);
        }
        let base = search
            .base
            .map(|base| path.parent().map_or(base.clone(), |dir| dir.join(&base)));
        let space = Self {
            strategy: search.strategy,
            trials: search.trials,
            seed: search.seed,
            seeds: search.seeds,
            base,
            params,
        };
        if space.strategy == Strategy::Grid && space.grid_size() > MAX_GRID {
            return Err(invalid(
                "params",
                &format!("make a grid of more than {MAX_GRID} points"),
            ));
        }
        Ok(space)
    }

    /// The number of grid points (the product of every parameter's grid values).
    fn grid_size(&self) -> usize {
        self.params
            .values()
            .map(|param| grid_values(param).len())
            .fold(1usize, |size, n| size.saturating_mul(n))
    }

    /// The trials this space plans, in order: a pure function of the space, so a resumed
    /// search plans the same ones.
    pub fn trials(&self) -> Vec<TrialParams> {
        match self.strategy {
            Strategy::Grid => {
                let axes: Vec<(&String, Vec<toml::Value>)> = self
                    .params
                    .iter()
                    .map(|(key, param)| (key, grid_values(param)))
                    .collect();
                let total = self.grid_size().min(self.trials.unwrap_or(usize::MAX));
                (0..total)
                    .map(|mut point| {
                        let mut params = TrialParams::new();
                        for (key, values) in axes.iter().rev() {
                            params.insert((*key).clone(), values[point % values.len()].clone());
                            point /= values.len();
                        }
                        params
                    })
                    .collect()
            }
            Strategy::Random => {
                let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
                (0..self.trials.unwrap_or(1))
                    .map(|_| {
                        self.params
                            .iter()
                            .map(|(key, param)| (key.clone(), draw(param, &mut rng)))
                            .collect()
                    })
                    .collect()
            }
        }
    }
}

/// A parameter from its table, or why it is invalid.
fn parse_param(table: &ParamTable) -> Result<Param, String> {
    match (&table.values, &table.min, &table.max) {
        (Some(values), None, None) => {
            if values.is_empty() {
                return Err("has no values".into());
            }
            if table.log || table.steps.is_some() {
                return Err("lists `values`: `log` and `steps` apply to ranges only".into());
            }
            Ok(Param::Choice(values.clone()))
        }
        (None, Some(min), Some(max)) => {
            let number = |value: &toml::Value, name: &str| match value {
                toml::Value::Integer(i) => Ok((*i as f64, true)),
                toml::Value::Float(f) if f.is_finite() => Ok((*f, false)),
                other => Err(format!("has `{name}` = {other}: a finite number is needed")),
            };
            let ((min, min_int), (max, max_int)) = (number(min, "min")?, number(max, "max")?);
            if min > max {
                return Err(format!("has `min` = {min} above `max` = {max}"));
            }
            if table.log && min <= 0.0 {
                return Err(format!(
                    "is a log range from {min}: both bounds must be positive"
                ));
            }
            if table.steps.is_some_and(|steps| steps < 2) && min < max {
                return Err("has `steps` below 2: a range's grid holds both ends".into());
            }
            Ok(Param::Range {
                min,
                max,
                log: table.log,
                integer: min_int && max_int,
                steps: table.steps,
            })
        }
        _ => Err("needs either `values = [...]` or both `min` and `max`".into()),
    }
}

/// The value of a range at `fraction` of its span (in `ln x` for log ranges).
fn at(min: f64, max: f64, log: bool, fraction: f64) -> f64 {
    if log {
        (min.ln() + fraction * (max.ln() - min.ln()))
            .exp()
            .clamp(min, max)
    } else {
        min + fraction * (max - min)
    }
}

/// A range's number as a TOML value: an integer (rounded, within the bounds) or a float.
fn number_value(x: f64, min: f64, max: f64, integer: bool) -> toml::Value {
    if integer {
        toml::Value::Integer(x.round().clamp(min, max) as i64)
    } else {
        toml::Value::Float(x)
    }
}

/// The values a parameter takes in a grid: its choices, or its range's `steps` points
/// (integers deduplicated).
fn grid_values(param: &Param) -> Vec<toml::Value> {
    match param {
        Param::Choice(values) => values.clone(),
        &Param::Range {
            min,
            max,
            log,
            integer,
            steps,
        } => {
            let steps = steps.unwrap_or(1).max(1);
            let mut values: Vec<toml::Value> = Vec::with_capacity(steps);
            for i in 0..steps {
                let fraction = if steps == 1 {
                    0.0
                } else {
                    i as f64 / (steps - 1) as f64
                };
                let value = number_value(at(min, max, log, fraction), min, max, integer);
                if !values.contains(&value) {
                    values.push(value);
                }
            }
            values
        }
    }
}

/// A random value of a parameter: a uniform choice, or a uniform point of the range (in `ln x`
/// for log ranges; integer ranges give each integer of `[min, max]` the same chance).
fn draw(param: &Param, rng: &mut ChaCha8Rng) -> toml::Value {
    match param {
        Param::Choice(values) => values[rng.random_range(0..values.len())].clone(),
        &Param::Range {
            min,
            max,
            log,
            integer,
            ..
        } => {
            if integer && !log {
                toml::Value::Integer(rng.random_range(min as i64..=max as i64))
            } else {
                let fraction: f64 = rng.random();
                number_value(at(min, max, log, fraction), min, max, integer)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(text: &str) -> TuneResult<SearchSpace> {
        SearchSpace::from_toml_str(text, Path::new("configs/tune/space.toml"))
    }

    #[test]
    fn a_grid_is_every_combination_last_key_fastest_within_the_budget() {
        let grid = space(
            "[search]\nstrategy = \"grid\"\n[params]\n\"model.layers\" = { values = [1, 2] }\n\
             \"optimizer.lr\" = { min = 0.001, max = 0.1, log = true, steps = 3 }\n",
        )
        .unwrap();
        let trials = grid.trials();
        assert_eq!(trials.len(), 6);
        let lr = |t: &TrialParams| t["optimizer.lr"].as_float().unwrap();
        assert_eq!(trials[0]["model.layers"], toml::Value::Integer(1));
        assert_eq!(trials[3]["model.layers"], toml::Value::Integer(2));
        assert!((lr(&trials[0]) - 0.001).abs() < 1e-12 && (lr(&trials[1]) - 0.01).abs() < 1e-12);
        assert!((lr(&trials[2]) - 0.1).abs() < 1e-12 && (lr(&trials[5]) - 0.1).abs() < 1e-12);
        let budget = SearchSpace {
            trials: Some(4),
            ..grid
        };
        assert_eq!(budget.trials(), trials[..4]);
    }

    #[test]
    fn random_draws_are_seeded_and_within_bounds() {
        let text = "[search]\ntrials = 50\nseed = 3\nbase = \"../train/cora.toml\"\n[params]\n\
                    \"model.dropout\" = { min = 0.1, max = 0.6 }\n\"model.layers\" = { min = 1, max = 3 }\n\
                    \"optimizer.weight_decay\" = { min = 1e-5, max = 1e-2, log = true }\n\
                    \"data.sequences\" = { values = [\"locality\", \"random\"] }\n";
        let random = space(text).unwrap();
        assert_eq!(
            random.base,
            Some(PathBuf::from("configs/tune/../train/cora.toml"))
        );
        let trials = random.trials();
        assert_eq!(trials, space(text).unwrap().trials());
        assert_ne!(
            trials,
            SearchSpace {
                seed: 4,
                ..random.clone()
            }
            .trials()
        );
        let mut layers = std::collections::BTreeSet::new();
        for trial in &trials {
            let dropout = trial["model.dropout"].as_float().unwrap();
            assert!((0.1..=0.6).contains(&dropout));
            let decay = trial["optimizer.weight_decay"].as_float().unwrap();
            assert!((1e-5..=1e-2).contains(&decay));
            layers.insert(trial["model.layers"].as_integer().unwrap());
        }
        assert_eq!(layers.into_iter().collect::<Vec<_>>(), [1, 2, 3]);
        // log-uniform: about half the draws below the geometric middle (1e-5 · 1e-2)^½
        let below = trials
            .iter()
            .filter(|t| t["optimizer.weight_decay"].as_float().unwrap() < 10f64.powf(-3.5))
            .count();
        assert!((10..=40).contains(&below), "{below} of 50");
    }

    #[test]
    fn invalid_spaces_name_the_key_and_the_line() {
        let error = |text: &str| space(text).unwrap_err().to_string();
        let message = error("[params]\n\"model.dropout\" = { min = 0.1, max = 0.6 }\n");
        assert!(message.contains("search.trials"), "{message}");
        let message = error(
            "[search]\nstrategy = \"grid\"\n[params]\n\"model.dropout\" = { min = 0.1, max = 0.6 }\n",
        );
        assert!(
            message.contains("params.\"model.dropout\"") && message.contains("steps"),
            "{message}"
        );
        let message =
            error("[search]\ntrials = 2\n[params]\n\"optimizer.lr\" = { min = 0.1, max = 0.01 }\n");
        assert!(
            message.contains("optimizer.lr") && message.contains("above"),
            "{message}"
        );
        let message = error(
            "[search]\ntrials = 2\n[params]\n\"optimizer.lr\" = { min = 0.0, max = 0.1, log = true }\n",
        );
        assert!(message.contains("positive"), "{message}");
        let message = error("[search]\ntrials = 2\n[params]\n\"optimizer.lr\" = { values = [] }\n");
        assert!(message.contains("no values"), "{message}");
        let message = error("[search]\ntrials = 2\nbudget = 3\n[params]\n");
        assert!(
            message.contains("line 3") && message.contains("budget"),
            "{message}"
        );
    }
}
