//! Pins how regorus, configured as poolguard configures it ([`new_engine`]), reads the Rego
//! constructs on which it differs from OPA (found running gatekeeper-library's suites). When a
//! regorus upgrade changes one of these, its test fails and [`super::lint`] is revisited.

use regorus::Value;

use crate::policy::engine::new_engine;

/// Evaluates `rule` of `rego` on an empty input: its value, or the error's first line.
fn eval(rego: &str, rule: &str) -> Result<Value, String> {
    let mut engine = new_engine().map_err(|e| e.to_string())?;
    engine
        .add_policy("t.rego".to_string(), rego.to_string())
        .map_err(|e| e.to_string())?;
    engine.set_input(Value::new_object());
    engine
        .eval_rule(rule.to_string())
        .map_err(|e| e.to_string())
}

#[test]
fn a_line_starting_with_a_paren_continues_the_line_before_as_a_call() {
    // OPA reads `x := f` (a function as a value, which it refuses) then the expression `(1)`;
    // regorus reads `x := f(1)`, so `p` is 2.
    let rego = "package t\nf(a) := a + 1\np := x {\n  x := f\n  (1)\n}\n";
    assert_eq!(eval(rego, "data.t.p"), Ok(Value::from(2)));
    assert_eq!(super::lint::errors(rego).len(), 1);
}

#[test]
fn a_v0_rule_with_several_bodies_is_refused() {
    // OPA: `p` holds when either body does; regorus refuses the source (a load error).
    let rego = "package t\np[x] { x := 1 } { x := 2 }\n";
    let err = eval(rego, "data.t.p").unwrap_err();
    assert!(err.contains("else cannot be used with set rules"), "{err}");
}

#[test]
fn not_of_a_call_with_an_undefined_argument_is_true() {
    // OPA: the undefined argument makes the rule undefined; regorus: `not` of the undefined
    // call is true.
    let rego = "package t\nf(a, b) { a == b }\np { not f(1, input.missing) }\n";
    assert_eq!(eval(rego, "data.t.p"), Ok(Value::from(true)));
    assert_eq!(super::lint::warnings(rego).len(), 1);
}

#[test]
fn sprintf_with_missing_arguments_is_an_error() {
    // OPA: "a %!v(MISSING)"; regorus: an evaluation error (the constraint errors on the
    // object instead of reporting the violation).
    let rego = "package t\np := sprintf(\"a %v %v\", [1])\n";
    assert!(eval(rego, "data.t.p").is_err());
    assert_eq!(super::lint::warnings(rego).len(), 1);
}

#[test]
fn several_bodies_expanded_read_as_in_opa() {
    let rego = "package t\np[x] {\n  x := 1\n} {\n  x := 2\n}\n";
    let (expanded, n) = super::bodies::expand(rego);
    assert_eq!(n, 1);
    assert_eq!(eval(&expanded, "data.t.p"), Ok(json_set([1, 2])));
}

fn json_set(items: [i64; 2]) -> Value {
    let mut set = std::collections::BTreeSet::new();
    for i in items {
        set.insert(Value::from(i));
    }
    Value::from(set)
}
