//! Bytes as a namespaces file (and as a nodes file): Namespace or Node objects in YAML or JSON,
//! lists or document streams. What parses is written back as a v1 List, in JSON as kubectl
//! prints it and in YAML as poolguard prints objects, and must read back the same. Seeded with
//! testdata/namespaces.yaml and testdata/audit/nodes.yaml.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use poolguard_core::documents;
use poolguard_core::labels::Labels;
use poolguard_core::namespaces::{parse_file_text, parse_nodes_text};
use serde_json::{json, Value};

type Parse = fn(&str, &str) -> anyhow::Result<BTreeMap<String, Labels>>;

fn round_trip(parsed: &BTreeMap<String, Labels>, kind: &str, parse: Parse) {
    let items: Vec<Value> = parsed
        .iter()
        .map(|(name, labels)| {
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "labels": labels}})
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let as_json = serde_json::to_string_pretty(&list).expect("JSON");
    match parse(&as_json, "written.json") {
        Ok(again) => assert_eq!(&again, parsed, "JSON round trip\n{as_json}"),
        Err(e) => panic!("the JSON written back does not read: {e:#}\n{as_json}"),
    }
    let as_yaml = documents::to_yaml(&list).expect("YAML");
    match parse(&as_yaml, "written.yaml") {
        Ok(again) => assert_eq!(&again, parsed, "YAML round trip\n{as_yaml}"),
        Err(e) => panic!("the YAML written back does not read: {e:#}\n{as_yaml}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(namespaces) = parse_file_text(text, "fuzz.yaml") {
        round_trip(&namespaces, "Namespace", parse_file_text);
    }
    if let Ok(nodes) = parse_nodes_text(text, "fuzz.yaml") {
        round_trip(&nodes, "Node", parse_nodes_text);
    }
});
