//! The chart's values.schema.json against the config poolguard loads: every key the config
//! accepts must be accepted under `config` too, or `helm install` refuses a config poolguard
//! would run with.

use serde_json::Value;

use poolguard_core::config::Config;

const FULL: &str = "testdata/config/full.yaml";
const SCHEMA: &str = "charts/poolguard/values.schema.json";
const PROBE: &str = "zzNotAKey";

fn full_config() -> Value {
    let text = std::fs::read_to_string(FULL).unwrap();
    poolguard_core::documents::parse_one(&text, FULL).unwrap()
}

/// The fields of the struct at `path` in `config`, from the error the config gives for an
/// unknown key there; None where any key is taken (a map of names, free-form parameters).
fn struct_fields(config: &Value, path: &[String]) -> Option<Vec<String>> {
    let mut probe = config.clone();
    let mut node = &mut probe;
    for key in path {
        node = match node {
            Value::Array(items) => &mut items[key.parse::<usize>().unwrap()],
            other => &mut other[key.as_str()],
        };
    }
    node.as_object_mut()?.insert(PROBE.to_string(), Value::Null);
    let err = serde_json::from_value::<Config>(probe).err()?.to_string();
    // "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, `c`".
    let rest = err.split_once(&format!("unknown field `{PROBE}`, "))?.1;
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect(),
    )
}

/// For each object of the config, by its path with list indices and map keys (names, not
/// fields) as `*`: the fields its struct has (None for a map), and the keys it has.
type Seen = std::collections::BTreeMap<String, (Option<Vec<String>>, Vec<String>)>;

fn walk(config: &Value, value: &Value, path: &mut Vec<String>, shape: &str, seen: &mut Seen) {
    match value {
        Value::Object(map) => {
            let fields = struct_fields(config, path);
            let entry = seen
                .entry(shape.to_string())
                .or_insert((fields.clone(), Vec::new()));
            entry.1.extend(map.keys().cloned());
            for (k, v) in map {
                let child = if fields.is_some() { k.as_str() } else { "*" };
                path.push(k.clone());
                walk(config, v, path, &format!("{shape}.{child}"), seen);
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(i.to_string());
                walk(config, v, path, &format!("{shape}.*"), seen);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Keys (and types and enums) of `value` that `schema` refuses: a small part of JSON Schema,
/// what values.schema.json uses to say which keys exist.
fn refused(value: &Value, schema: &Value, at: &str, errors: &mut Vec<String>) {
    let is = |t: &str| match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    };
    match &schema["type"] {
        Value::String(t) if !is(t) => errors.push(format!("{at}: not of type {t}")),
        Value::Array(ts) if !ts.iter().filter_map(Value::as_str).any(is) => {
            errors.push(format!("{at}: none of the types {ts:?}"))
        }
        _ => {}
    }
    if let Some(values) = schema["enum"].as_array() {
        if !values.contains(value) {
            errors.push(format!("{at}: {value} is not one of {values:?}"));
        }
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let at = format!("{at}.{k}");
                match (schema["properties"].get(k), &schema["additionalProperties"]) {
                    (Some(s), _) => refused(v, s, &at, errors),
                    (None, Value::Bool(false)) => errors.push(format!("{at}: not accepted")),
                    (None, s @ Value::Object(_)) => refused(v, s, &at, errors),
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refused(v, &schema["items"], &format!("{at}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

#[test]
fn the_full_example_loads_and_leaves_no_key_out() {
    let text = std::fs::read_to_string(FULL).unwrap();
    Config::parse(&text, FULL).unwrap();
    let config = full_config();
    let mut seen = Seen::new();
    walk(&config, &config, &mut Vec::new(), "config", &mut seen);
    let mut missing = Vec::new();
    for (shape, (fields, keys)) in &seen {
        // A pool's policy settings parse like the cluster-wide ones, but the config refuses
        // what is cluster-wide only there.
        let pool_policy = shape == "config.pools.*.policies.*";
        for field in fields.iter().flatten() {
            let cluster_wide = ["rollout", "dependencies", "ignorePending"].contains(&&**field);
            let refused_here = pool_policy && cluster_wide;
            if !keys.contains(field) && !refused_here {
                missing.push(format!("{shape}.{field}"));
            }
        }
    }
    assert!(missing.is_empty(), "{FULL} leaves out {missing:?}");
    // The probe tells structs from maps.
    assert!(seen["config.evaluation"].0.is_some(), "{seen:?}");
    assert!(seen["config.policies"].0.is_none(), "{seen:?}");
}

#[test]
fn the_chart_schema_accepts_every_config_key() {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(SCHEMA).unwrap()).unwrap();
    let mut errors = Vec::new();
    refused(
        &full_config(),
        &schema["properties"]["config"],
        "config",
        &mut errors,
    );
    assert!(errors.is_empty(), "{SCHEMA} refuses {FULL}: {errors:#?}");
}

/// The check itself: a key the schema does not know is caught.
#[test]
fn an_unknown_key_is_refused() {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(SCHEMA).unwrap()).unwrap();
    let mut config = full_config();
    config["evaluation"]["cacheSize"] = 1.into();
    config["limits"]["maxImagesPerPod"] = "many".into();
    let mut errors = Vec::new();
    refused(
        &config,
        &schema["properties"]["config"],
        "config",
        &mut errors,
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    // And the config refuses it too, naming the fields it knows.
    let fields = struct_fields(&full_config(), &["evaluation".to_string()]).unwrap();
    assert!(fields.contains(&"resultCacheMiB".to_string()), "{fields:?}");
}
