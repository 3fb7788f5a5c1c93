//! `poolguard native` as a user runs it: the generated objects, in YAML, and what stays on the
//! webhook. (That the objects decide as the webhook does is proved through kube-apiserver by
//! integration/e2e/tests/native.rs.)

use std::process::Command;

use poolguard_core::documents;
use poolguard_core::native;

fn native_for(config: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poolguard"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "native",
            "--config",
            config,
            "--policies-dir",
            "policies",
            "--exclude-namespace",
            "kube-system",
        ])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_config_prints_its_objects_and_what_stays_on_the_webhook() {
    let (code, stdout, stderr) = native_for("testdata/config/example.yaml");
    assert_eq!(code, 0, "{stderr}");
    let objects = documents::parse(&stdout, "stdout").unwrap();
    let names: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "MutatingAdmissionPolicy/poolguard-pool",
            "MutatingAdmissionPolicyBinding/poolguard-pool",
            "ValidatingAdmissionPolicy/poolguard-placement",
            "ValidatingAdmissionPolicyBinding/poolguard-placement",
            "ValidatingAdmissionPolicy/poolguard-images",
            "ValidatingAdmissionPolicyBinding/poolguard-images",
            // Both shipped policies at the same enforcement in the same namespaces: one policy
            // each, a validation per shipped policy.
            "ValidatingAdmissionPolicy/poolguard-allowedrepositories-and-latesttag",
            "ValidatingAdmissionPolicyBinding/poolguard-allowedrepositories-and-latesttag",
            "ValidatingAdmissionPolicy/poolguard-allowedrepositories-and-latesttag.pool-gpu",
            "ValidatingAdmissionPolicyBinding/poolguard-allowedrepositories-and-latesttag.pool-gpu",
        ]
    );
    for object in &objects {
        assert_eq!(object["apiVersion"], native::API_VERSION);
        assert_eq!(
            object["metadata"]["labels"][native::MANAGED_LABEL],
            native::MANAGED_VALUE
        );
    }
    // The one thing the example leaves to the webhook.
    let on_webhook: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("# on the webhook: "))
        .collect();
    assert_eq!(on_webhook.len(), 1, "{stdout}");
    assert!(on_webhook[0].contains("pool authority"), "{stdout}");
}

#[test]
fn a_config_that_does_not_load_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "policies:\n  nosuchpolicy: {parameters: {}}\n").unwrap();
    let (code, stdout, stderr) = native_for(config.to_str().unwrap());
    assert_eq!(code, 2, "{stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("nosuchpolicy"), "{stderr}");
}
