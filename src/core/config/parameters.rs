//! A policy's parameters (its `input.parameters`), with the two forms every evaluation needs
//! made once when the config is read: the JSON text (part of the result memo's key) and the
//! Rego value.

use std::ops::Deref;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The parameters as written, their JSON text and their Rego value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "Map<String, Value>", into = "Map<String, Value>")]
pub struct Parameters {
    map: Map<String, Value>,
    text: String,
    rego: regorus::Value,
}

impl Parameters {
    /// The parameters as JSON text (serde_json's compact form of the object).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parameters as a Rego value (`input.parameters`); cloning it shares it.
    pub fn rego(&self) -> &regorus::Value {
        &self.rego
    }

    pub fn map(&self) -> &Map<String, Value> {
        &self.map
    }
}

impl From<Map<String, Value>> for Parameters {
    fn from(map: Map<String, Value>) -> Parameters {
        let object = Value::Object(map.clone());
        let text = object.to_string();
        let rego = regorus::Value::from(object);
        Parameters { map, text, rego }
    }
}

impl From<Parameters> for Map<String, Value> {
    fn from(parameters: Parameters) -> Map<String, Value> {
        parameters.map
    }
}

impl Default for Parameters {
    fn default() -> Parameters {
        Parameters::from(Map::new())
    }
}

impl PartialEq for Parameters {
    fn eq(&self, other: &Parameters) -> bool {
        self.map == other.map
    }
}

impl Deref for Parameters {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_and_the_rego_value_are_the_parameters() {
        let written = json!({"repositories": ["a.io/", "b.io/"], "n": 3, "nested": {"x": null}});
        let Value::Object(map) = written.clone() else {
            unreachable!()
        };
        let parameters: Parameters = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(parameters.map(), &map);
        assert_eq!(parameters.text(), written.to_string());
        assert_eq!(parameters.rego(), &regorus::Value::from(written.clone()));
        assert_eq!(serde_json::to_value(&parameters).unwrap(), written);
        assert_eq!(Parameters::default().text(), "{}");
    }
}
