//! Bytes as an AdmissionReview body: parsed as the server parses it, then decided by both
//! webhooks under every test config with the shipped policies (see `decide_and_check` for the
//! invariants). Seeded with testdata/reviews.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolguard_core::admission;
use poolguard_fuzz::{decide_and_check, shipped};

fuzz_target!(|body: &[u8]| {
    let shipped = shipped();
    let Ok(review) = admission::parse_review(body) else {
        return;
    };
    for (_, rules) in &shipped.rules {
        decide_and_check(&review, rules, &shipped.namespaces);
    }
});
