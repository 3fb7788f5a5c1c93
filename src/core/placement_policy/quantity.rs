//! Kubernetes resource quantities (`500m`, `2Gi`, `1.5`, `1e3`) as integers: cpu in
//! millicores, everything else (memory and storage in bytes, pods, extended resources such as
//! `nvidia.com/gpu`) in base units. Fractions are rounded up, as the scheduler rounds requests.
//!
//! Grammar (the API server's): an optional sign, a decimal number (`12`, `1.5`, `.5`, `5.`),
//! then a suffix: binary `Ki Mi Gi Ti Pi Ei`, decimal `n u m k M G T P E` or none, or a decimal
//! exponent `e<int>` / `E<int>`. Negative quantities are refused here (no request, limit or
//! allocatable is negative), as are values past `i64` and numbers of more than 30 digits.

use std::fmt;

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuantityError {
    pub text: String,
    pub reason: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a valid quantity: {}",
            self.text, self.reason
        )
    }
}

impl std::error::Error for QuantityError {}

/// The amount of `resource` that `text` gives: millicores for `cpu`, base units otherwise.
pub(crate) fn amount(resource: &str, text: &str) -> Result<i64, QuantityError> {
    let scale = if resource == "cpu" { 3 } else { 0 };
    scaled(text, scale)
}

/// A quantity written as JSON: a string, or a plain number (what a hand-written YAML file
/// gives for `cpu: 2`).
pub(crate) fn amount_of_json(
    resource: &str,
    value: &serde_json::Value,
) -> Result<i64, QuantityError> {
    match value {
        serde_json::Value::String(s) => amount(resource, s),
        serde_json::Value::Number(n) => amount(resource, &n.to_string()),
        other => Err(QuantityError {
            text: other.to_string(),
            reason: "must be a string such as \"500m\" or \"2Gi\"",
        }),
    }
}

/// Significant digits read (leading zeros, and trailing zeros of a fraction, are not counted):
/// far more than an `i64` holds, few enough for `u128` arithmetic.
const MAX_DIGITS: usize = 30;

/// `ceil(text * 10^scale)`.
fn scaled(text: &str, scale: i32) -> Result<i64, QuantityError> {
    let fail = |reason| QuantityError {
        text: text.to_string(),
        reason,
    };
    let unsigned = match text.as_bytes().first() {
        Some(b'+') => &text[1..],
        Some(b'-') => return Err(fail("must not be negative")),
        Some(_) => text,
        None => return Err(fail("empty")),
    };
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(fail("expected a number"));
    }
    if fraction.contains('.') {
        return Err(fail("more than one decimal point"));
    }
    let fraction = fraction.trim_end_matches('0');
    let (binary_shift, decimal_exponent) = suffix_of(suffix).ok_or_else(|| {
        fail("unknown suffix (binary: Ki Mi Gi Ti Pi Ei; decimal: n u m k M G T P E; or an exponent such as e3)")
    })?;
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > MAX_DIGITS {
        return Err(fail("too many digits"));
    }
    if digits.is_empty() {
        return Ok(0);
    }
    let value: u128 = digits.parse().map_err(|_| fail("expected a number"))?;
    let value = value
        .checked_mul(1u128 << binary_shift)
        .ok_or_else(|| fail("too large"))?;
    let exponent = i64::from(decimal_exponent) - fraction.len() as i64 + i64::from(scale);
    let value = if exponent >= 0 {
        let factor = u32::try_from(exponent)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .ok_or_else(|| fail("too large"))?;
        value.checked_mul(factor).ok_or_else(|| fail("too large"))?
    } else {
        match u32::try_from(-exponent)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
        {
            Some(divisor) => value.div_ceil(divisor),
            // Smaller than any unit, but not nothing.
            None => u128::from(value > 0),
        }
    };
    i64::try_from(value).map_err(|_| fail("too large"))
}

/// The binary shift and decimal exponent of a suffix.
fn suffix_of(suffix: &str) -> Option<(u32, i32)> {
    Some(match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Anything wider is refused as too large or rounds to the smallest unit below.
            (0, rest.parse::<i32>().ok()?.clamp(-1000, 1000))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_table() {
        // (resource, text, amount)
        let cases = [
            ("cpu", "1", 1000),
            ("cpu", "500m", 500),
            ("cpu", "0.5", 500),
            ("cpu", ".25", 250),
            ("cpu", "2.", 2000),
            ("cpu", "+1.5", 1500),
            ("cpu", "100u", 1), // a fraction of a millicore rounds up
            ("cpu", "1n", 1),
            ("cpu", "0", 0),
            ("cpu", "0.0001", 1),
            ("cpu", "1e3", 1_000_000),
            ("cpu", "1E-3", 1),
            ("cpu", "64k", 64_000_000),
            ("memory", "128974848", 128_974_848),
            ("memory", "129e6", 129_000_000),
            ("memory", "129M", 129_000_000),
            ("memory", "123Mi", 128_974_848),
            ("memory", "1.5Gi", 1_610_612_736),
            ("memory", "1Ki", 1024),
            ("memory", "7Ei", 7 << 60),
            (
                "memory",
                "1.000000000000000000000000000000000000Ei",
                1 << 60,
            ),
            ("memory", "1500m", 2), // 1.5 bytes rounds up
            ("memory", "1E", 1_000_000_000_000_000_000),
            ("ephemeral-storage", "10Gi", 10 * (1 << 30)),
            ("nvidia.com/gpu", "1", 1),
            ("nvidia.com/gpu", "2", 2),
            ("pods", "110", 110),
            ("hugepages-2Mi", "4Mi", 4 << 20),
            ("memory", "000123", 123),
            ("memory", "0.000000000000000000000000000001", 1),
            ("memory", "1e-2000", 1),
            ("memory", "0e5000", 0),
        ];
        for (resource, text, want) in cases {
            assert_eq!(amount(resource, text), Ok(want), "{resource} {text}");
        }
    }

    #[test]
    fn invalid_quantities_are_errors_that_say_why() {
        let cases = [
            ("", "empty"),
            ("-1", "must not be negative"),
            ("Gi", "expected a number"),
            (".", "expected a number"),
            ("1.2.3", "more than one decimal point"),
            ("1 Gi", "unknown suffix"),
            ("1gi", "unknown suffix"),
            ("1KB", "unknown suffix"),
            ("1e", "unknown suffix"),
            ("1e+", "unknown suffix"),
            ("1e3.5", "unknown suffix"),
            ("1Gi5", "unknown suffix"),
            ("0x10", "unknown suffix"),
            ("9223372036854775808", "too large"),
            ("8Ei", "too large"),
            ("1e19", "too large"),
            ("1e5000", "too large"),
            ("1234567890123456789012345678901", "too many digits"),
        ];
        for (text, want) in cases {
            let err = amount("memory", text).unwrap_err();
            assert!(err.reason.starts_with(want), "{text:?}: {err}");
            assert!(err.to_string().contains(&format!("{text:?}")), "{err}");
        }
        // In millicores the limit comes a thousand times sooner.
        assert_eq!(
            amount("cpu", "9223372036854775").unwrap(),
            9_223_372_036_854_775_000
        );
        assert_eq!(
            amount("cpu", "9223372036854776").unwrap_err().reason,
            "too large"
        );
    }

    #[test]
    fn json_numbers_and_strings() {
        use serde_json::json;
        assert_eq!(amount_of_json("cpu", &json!("250m")), Ok(250));
        assert_eq!(amount_of_json("cpu", &json!(2)), Ok(2000));
        assert_eq!(amount_of_json("cpu", &json!(0.5)), Ok(500));
        assert_eq!(amount_of_json("memory", &json!(1024)), Ok(1024));
        let err = amount_of_json("cpu", &json!(true)).unwrap_err();
        assert!(err.reason.contains("must be a string"), "{err}");
        assert!(amount_of_json("cpu", &json!(-1)).is_err());
    }
}
