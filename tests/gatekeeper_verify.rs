//! `poolguard verify` and `--gatekeeper-dir` from the command line, on the templates, constraints
//! and suites of testdata/gatekeeper (written for these tests: nothing is fetched).

use std::process::{Command, Output};

fn poolguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolguard"))
        .args(args)
        .output()
        .expect("runs poolguard")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_case_of_the_test_suites_agrees() {
    let out = poolguard(&[
        "verify",
        "--verbose",
        "testdata/gatekeeper/requiredowner",
        "testdata/gatekeeper/namespaceteam",
        "testdata/gatekeeper/maxreplicas/suite.yaml",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.ends_with(
            "3 suites; templates: 3 loaded, 0 not; cases: 24 agree, 0 disagree, 0 skipped\n"
        ),
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok   ")).count(),
        24
    );
    // The lint names the construct on which regorus and OPA may differ.
    assert!(
        stdout.contains("# lint: testdata/gatekeeper/requiredowner/template.yaml: template `requiredowner` (rego): line 7: `not` of a call with a reference argument"),
        "{stdout}"
    );
}

#[test]
fn templates_that_do_not_load_are_one_line_errors_naming_them() {
    let out = poolguard(&["verify", "testdata/gatekeeper/broken"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let loads: Vec<&str> = stdout.lines().filter(|l| l.starts_with("LOAD ")).collect();
    assert_eq!(
        loads,
        [
            "LOAD testdata/gatekeeper/broken/does-not-compile.yaml: template `broken` does not compile: broken:3:25: expecting }",
            "LOAD testdata/gatekeeper/broken/needs-inventory.yaml: template `uniquename` needs data.inventory (referential data, which poolguard does not provide)",
            "LOAD testdata/gatekeeper/broken/paren-line.yaml: template `parenline` (rego): line 5: starts with `(` after line 4 ends a value: regorus reads it as a call continuing line 4, OPA as a new expression; join the lines or end line 4 with `;`",
        ]
    );
    assert!(
        stdout.ends_with(
            "1 suite; templates: 0 loaded, 3 not; cases: 0 agree, 3 disagree, 0 skipped\n"
        ),
        "{stdout}"
    );
}

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite.yaml");
    for (suite_text, want) in [
        ("kind: Suite\ntests: [{template: t.yaml}]\n", "at `tests[0]`: missing field `constraint`"),
        ("kind: List\n", "not a test suite: `kind: List`, where a gator test suite has `kind: Suite`"),
        ("kind: Suite\ntests: [{template: t, constraint: c, cases: [{object: o, assertions: [{violations: maybe}]}]}]\n", "reading"),
    ] {
        std::fs::write(&suite, suite_text).unwrap();
        let out = poolguard(&["verify", suite.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        if want == "reading" {
            // Files that cannot be read are the test's load error, not bad input.
            assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
            assert!(stdout.contains("LOAD reading "), "{stdout}");
            continue;
        }
        assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
        assert!(stderr.contains(want) && stderr.trim_end().lines().count() == 1, "{stderr}");
    }
    let out = poolguard(&["verify", "testdata/no-such-suite.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("reading testdata/no-such-suite.yaml"));
}

#[test]
fn constraints_decide_admission_through_eval() {
    let eval = |dir: &str, object: &str| {
        poolguard(&[
            "eval",
            "--namespaces-file",
            "testdata/namespaces.yaml",
            "--webhook",
            "validate",
            "--gatekeeper-dir",
            dir,
            object,
        ])
    };
    let out = eval(
        "testdata/gatekeeper/requiredowner",
        "testdata/gatekeeper/requiredowner/objects/pod-unowned.yaml",
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("#   pods-need-owner: Pod orphan has no owner label"),
        "{stdout}"
    );
    let out = eval(
        "testdata/gatekeeper/maxreplicas",
        "testdata/gatekeeper/maxreplicas/objects/five.yaml",
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "# warning: at-most-three-replicas: StatefulSet big asks for 5 replicas, at most 3"
        ),
        "{stdout}"
    );
    let out = eval(
        "testdata/gatekeeper/broken",
        "testdata/gatekeeper/maxreplicas/objects/five.yaml",
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "poolguard: error: testdata/gatekeeper/broken/does-not-compile.yaml: template `broken` does not compile: broken:3:25: expecting }"
    );
}

#[test]
fn constraints_take_part_in_the_audit_with_the_namespace_from_its_labels() {
    let out = poolguard(&[
        "audit",
        "--manifests",
        "testdata/gatekeeper/namespaceteam/objects",
        "--namespaces-file",
        "testdata/gatekeeper/namespaceteam/objects/namespaces.yaml",
        "--gatekeeper-dir",
        "testdata/gatekeeper/namespaceteam",
        "--output",
        "json",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let results: serde_json::Value = serde_json::from_str(&stdout).expect("JSON results");
    let rows: Vec<[&str; 5]> = results
        .as_array()
        .expect("a list of results")
        .iter()
        .filter(|r| r["policy"] != "placement")
        .map(|r| {
            let res = &r["resource"];
            [
                &res["namespace"],
                &res["kind"],
                &res["name"],
                &r["policy"],
                &r["result"],
            ]
            .map(|v| v.as_str().unwrap_or_default())
        })
        .collect();
    // The namespaceSelector (env: prod) reads the namespaces' labels: dev is not selected. The
    // Namespace objects in the files (cluster-scoped, no pod spec) are judged by the constraints
    // that match Namespaces, the namespaceSelector reading their own labels.
    assert_eq!(
        rows,
        [
            [
                "",
                "Namespace",
                "costed",
                "namespaces-need-cost-center",
                "pass"
            ],
            [
                "",
                "Namespace",
                "prod-c",
                "namespaces-need-cost-center",
                "fail"
            ],
            ["", "Namespace", "prod-c", "prod-needs-team", "fail"],
            [
                "",
                "Namespace",
                "prod-a",
                "namespaces-need-cost-center",
                "fail"
            ],
            ["", "Namespace", "prod-a", "prod-needs-team", "fail"],
            [
                "",
                "Namespace",
                "prod-b",
                "namespaces-need-cost-center",
                "fail"
            ],
            ["", "Namespace", "prod-b", "prod-needs-team", "pass"],
            [
                "",
                "Namespace",
                "dev",
                "namespaces-need-cost-center",
                "fail"
            ],
            ["prod-a", "Pod", "app", "prod-needs-team", "fail"],
            ["prod-b", "Pod", "app", "prod-needs-team", "pass"],
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains("namespace prod-a of Pod app has no team label"),
        "{stdout}"
    );
}

#[test]
fn config_check_loads_constraints_and_prints_the_lint() {
    let out = poolguard(&[
        "config",
        "check",
        "--gatekeeper-dir",
        "testdata/gatekeeper/requiredowner",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "namespaces-need-owner, pods-need-owner, services-need-owner, team-web-needs-team"
        ),
        "{stdout}"
    );
    assert!(
        stderr.starts_with("poolguard: warning: testdata/gatekeeper/requiredowner/template.yaml: template `requiredowner` (rego): line 7: `not` of a call"),
        "{stderr}"
    );
}

/// The `poolguard verify` commands docs/gatekeeper.md prints pass, as printed.
#[test]
fn the_documented_verify_commands_pass() {
    let doc = std::fs::read_to_string("docs/gatekeeper.md").unwrap();
    let commands: Vec<Vec<&str>> = doc
        .lines()
        .filter_map(|line| line.strip_prefix("poolguard verify "))
        .map(|rest| {
            let command = rest.split('#').next().unwrap_or("");
            std::iter::once("verify")
                .chain(command.split_whitespace())
                .collect()
        })
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    for args in commands {
        let out = poolguard(&args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}{stderr}");
    }
}

/// `verify --exceptions-dir`: a case a live PolicyException matches is decided as admission
/// decides it (its violations allowed), so the suite's `over` case, which expects one
/// violation, disagrees; an expired exception matches nothing (a warning says so) and every case
/// agrees again; an exception without a ticket is bad input.
#[test]
fn suites_are_decided_under_the_exceptions_given() {
    let dir = tempfile::tempdir().unwrap();
    let at = |secs: u64| {
        let t = std::time::SystemTime::now() + std::time::Duration::from_secs(secs);
        humantime::format_rfc3339_seconds(t).to_string()
    };
    let write = |expires: &str, ticket: &str| {
        std::fs::write(
            dir.path().join("big.yaml"),
            format!("apiVersion: poolguard.io/v1alpha1\nkind: PolicyException\nmetadata: {{name: big, namespace: platform}}\nspec:\n  policies: [at-most-three-replicas]\n  match: {{names: [big]}}\n  expires: \"{expires}\"\n{ticket}"),
        )
        .unwrap()
    };
    let verify = || {
        poolguard(&[
            "verify",
            "testdata/gatekeeper/maxreplicas/suite.yaml",
            "--exceptions-dir",
            dir.path().to_str().unwrap(),
        ])
    };
    write(&at(86_400), "  ticket: OPS-7\n");
    let out = verify();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert_eq!(fails.len(), 1, "{stdout}");
    assert!(fails[0].contains("/ over:"), "{stdout}");

    // Expired: matches nothing, said on stderr.
    write("2020-01-01T00:00:00Z", "  ticket: OPS-7\n");
    let out = verify();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains(
            "PolicyException platform/big expired at 2020-01-01T00:00:00Z; it matches nothing"
        ),
        "{stderr}"
    );

    // No ticket: bad input, one line naming the file.
    write(&at(86_400), "");
    let out = verify();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains(
            "big.yaml: document 1: PolicyException platform/big: spec.ticket is required"
        ),
        "{stderr}"
    );
}
