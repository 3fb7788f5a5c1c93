//! Peak memory of parsing the worst AdmissionReview bodies at the default body limit, each in a
//! process of its own (this test runs itself once per body), as `VmHWM` in /proc/self/status.
//! Run with `--nocapture` to see the table.

use std::process::Command;

use poolguard_core::admission;

const MIB: usize = 1024 * 1024;
/// The default `--max-body-bytes`.
const BODY: usize = 24 * MIB;
const CHILD: &str = "POOLGUARD_PARSE_MEMORY_BODY";
/// Set in a child: parse with `serde_json` alone, as `parse_review` did before it estimated the
/// parsed size first (the numbers to compare with).
const UNGUARDED: &str = "POOLGUARD_PARSE_MEMORY_UNGUARDED";

/// Peak resident memory of this process so far, in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `item` repeated in a JSON array (or, with `object`, as the members of an object) until the
/// body is about [`BODY`] bytes.
fn filled(item: impl Fn(usize) -> String) -> Vec<u8> {
    let mut body = b"[".to_vec();
    let mut i = 0;
    while body.len() < BODY - 64 {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item(i).as_bytes());
        i += 1;
    }
    body.push(b']');
    body
}

/// A pod review whose labels are `members` (the text between the braces).
fn labelled_pod(members: &[u8]) -> Vec<u8> {
    let mut body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"namespace":"n","operation":"CREATE","object":{"metadata":{"labels":{"#.to_vec();
    body.extend_from_slice(members);
    body.extend_from_slice(br#"}},"spec":{"containers":[{"name":"c","image":"x"}]}}}}"#);
    body
}

fn body(kind: &str) -> Vec<u8> {
    match kind {
        "empty arrays" => filled(|_| "[]".into()),
        "empty objects" => filled(|_| "{}".into()),
        "numbers" => filled(|_| "0".into()),
        "short strings" => filled(|_| "\"\"".into()),
        "nested arrays (depth 60)" => filled(|_| format!("{}{}", "[".repeat(60), "]".repeat(60))),
        "objects of one member" => filled(|_| "{\"a\":0}".into()),
        "labels" => {
            let mut members = Vec::new();
            let mut i = 0usize;
            while members.len() < BODY - 256 {
                if i > 0 {
                    members.push(b',');
                }
                members.extend_from_slice(format!("\"{i:x}\":\"\"").as_bytes());
                i += 1;
            }
            labelled_pod(&members)
        }
        "one long string" => {
            labelled_pod(format!("\"a\":\"{}\"", "\\u003c".repeat((BODY - 512) / 6)).as_bytes())
        }
        other => panic!("{other}"),
    }
}

const KINDS: [&str; 8] = [
    "empty arrays",
    "empty objects",
    "numbers",
    "short strings",
    "nested arrays (depth 60)",
    "objects of one member",
    "labels",
    "one long string",
];

#[test]
fn parsing_the_worst_bodies_stays_bounded() {
    if let Ok(kind) = std::env::var(CHILD) {
        let body = body(&kind);
        let before = peak_kib();
        let verdict = if std::env::var_os(UNGUARDED).is_some() {
            let parsed = serde_json::from_slice::<serde_json::Value>(&body);
            let verdict = if parsed.is_ok() { "parsed" } else { "invalid" };
            drop(parsed);
            verdict.to_string()
        } else {
            match admission::parse_review(&body) {
                Ok(_) => "parsed".to_string(),
                Err(e) => e.0.chars().take(60).collect(),
            }
        };
        let after = peak_kib();
        println!("PEAK\t{}\t{before}\t{after}\t{verdict}", body.len());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut worst = 0;
    for (kind, unguarded) in KINDS.iter().flat_map(|k| [(*k, true), (*k, false)]) {
        let mut child = Command::new(&exe);
        child
            .args([
                "--exact",
                "parsing_the_worst_bodies_stays_bounded",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, kind);
        if unguarded {
            child.env(UNGUARDED, "1");
        }
        let out = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            // libtest may print the test's name on the same line first.
            .find_map(|l| l.split_once("PEAK\t").map(|(_, rest)| rest))
            .unwrap_or_else(|| {
                panic!("{kind}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr))
            });
        let fields: Vec<&str> = line.split('\t').collect();
        let (bytes, before, after): (u64, u64, u64) = (
            fields[0].parse().unwrap(),
            fields[1].parse().unwrap(),
            fields[2].parse().unwrap(),
        );
        let growth = after - before;
        if !unguarded {
            worst = worst.max(growth);
        }
        let how = if unguarded {
            "serde_json alone"
        } else {
            "parse_review"
        };
        println!(
            "{kind:<26} {how:<16} body {:>5.1} MiB  peak before parsing {:>6.1} MiB, after {:>6.1} MiB (+{:>6.1} MiB): {}",
            bytes as f64 / MIB as f64,
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            growth as f64 / 1024.0,
            fields[3]
        );
    }
    // The parsed document is held to `admission::MAX_PARSED_BYTES` (an over-estimate).
    assert!(
        worst as usize * 1024 <= admission::MAX_PARSED_BYTES,
        "parsing grew the peak by {worst} KiB"
    );
}
