//! A trial's configuration: the base [`TrainConfig`] with the trial's parameters set at their
//! dotted keys, checked as `train --config` would check a file.

use crate::config::TrainConfig;

use super::error::{TuneError, TuneResult};
use super::space::TrialParams;

/// `base` with each parameter of `params` set (`optimizer.lr = 0.01` sets `[optimizer] lr`),
/// then validated.
///
/// # Errors
///
/// [`TuneError::Param`] naming the key when it is not a config field, its value has the wrong
/// type, or the result fails validation.
pub fn trial_config(base: &TrainConfig, params: &TrialParams) -> TuneResult<TrainConfig> {
    let mut document = toml::Value::try_from(base).map_err(|err| TuneError::Param {
        key: String::new(),
        value: String::new(),
        reason: format!("the base config does not serialize: {err}"),
    })?;
    let mut config = base.clone();
    for (key, value) in params {
        let rejected = |reason: String| TuneError::Param {
            key: key.clone(),
            value: value.to_string(),
            reason,
        };
        set_path(&mut document, key, value.clone()).map_err(rejected)?;
        let text = toml::to_string(&document).map_err(|err| rejected(err.to_string()))?;
        config = TrainConfig::from_toml_str(&text)
            .map_err(|message| rejected(strip_location(&message)))?;
    }
    config.validate().map_err(|err| TuneError::Param {
        key: params.keys().cloned().collect::<Vec<_>>().join(", "),
        value: "(this trial's values)".into(),
        reason: err.to_string(),
    })?;
    Ok(config)
}

/// Sets `value` at the dotted `key` of `document`, creating missing tables on the way.
fn set_path(document: &mut toml::Value, key: &str, value: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|part| part.is_empty()) {
        return Err("is not a dotted config key such as `optimizer.lr`".into());
    }
    let (leaf, sections) = parts.split_last().ok_or("is empty")?;
    let mut table = document.as_table_mut().ok_or("the config is not a table")?;
    for (depth, section) in sections.iter().enumerate() {
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{}` is a value, not a section", parts[..=depth].join(".")))?;
    }
    table.insert(leaf.to_string(), value);
    Ok(())
}

/// A parse message of the generated TOML without its line and column, which would point into
/// text the user never saw.
fn strip_location(message: &str) -> String {
    match message.split_once(": ") {
        Some((location, rest)) if location.starts_with("line ") => rest.to_string(),
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, toml::Value)]) -> TrialParams {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect()
    }

    #[test]
    fn parameters_land_on_their_fields_and_the_rest_is_the_base() {
        let mut base = TrainConfig::default();
        base.training.epochs = 7;
        let config = trial_config(
            &base,
            &params(&[
                ("optimizer.lr", toml::Value::Float(0.01)),
                ("model.layers", toml::Value::Integer(3)),
                ("data.sequences", toml::Value::String("random".into())),
            ]),
        )
        .unwrap();
        assert_eq!(config.optimizer.lr, Some(0.01));
        assert_eq!(config.model.layers, Some(3));
        assert_eq!(
            config.data.sequences,
            megagraph_graph::SequenceStrategy::Random
        );
        let mut expected = base.clone();
        expected.optimizer.lr = Some(0.01);
        expected.model.layers = Some(3);
        expected.data.sequences = megagraph_graph::SequenceStrategy::Random;
        assert_eq!(config, expected);
    }

    #[test]
    fn unknown_fields_wrong_types_and_invalid_values_name_the_key() {
        let base = TrainConfig::default();
        let error = |key: &str, value: toml::Value| {
            trial_config(&base, &params(&[(key, value)]))
                .unwrap_err()
                .to_string()
        };
        let message = error("optimizer.learning_rate", toml::Value::Float(0.1));
        assert!(
            message.contains("optimizer.learning_rate") && message.contains("unknown field"),
            "{message}"
        );
        let message = error("model.layers", toml::Value::String("three".into()));
        assert!(message.contains("model.layers"), "{message}");
        let message = error("model.dropout", toml::Value::Float(1.5));
        assert!(message.contains("model.dropout"), "{message}");
        let message = error("model.dropout.rate", toml::Value::Float(0.1));
        assert!(message.contains("`model.dropout` is a value"), "{message}");
        // a key that is unset in the base still names itself
        let message = error("optimizer.lr.peak", toml::Value::Float(0.1));
        assert!(message.contains("optimizer.lr.peak"), "{message}");
    }
}
