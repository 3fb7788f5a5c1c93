//! Bytes (as text) as a container image reference, parsed as the runtime parses it. A parsed
//! reference's canonical form and repository parse back to the same registry, path, tag and
//! digest; an error is one printable line that quotes (a prefix of) the input. Seeded with the
//! images of testdata/reviews.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolguard_core::image;

fuzz_target!(|data: &[u8]| {
    let Ok(reference) = std::str::from_utf8(data) else {
        return;
    };
    let _ = image::is_local_image_id(reference);
    match image::parse(reference) {
        Ok(parsed) => {
            assert!(!parsed.registry.is_empty() && !parsed.path.is_empty());
            assert!(parsed.registry.is_ascii() && parsed.path.is_ascii());
            assert!(parsed.path.len() <= image::NAME_TOTAL_LENGTH_MAX);
            let canonical = parsed.to_string();
            match image::parse(&canonical) {
                Ok(again) => assert_eq!(again, parsed, "{reference:?} -> {canonical:?}"),
                Err(e) => panic!("{reference:?} -> {canonical:?}: {e}"),
            }
            let repository = parsed.repository();
            assert_eq!(image::repository(reference).ok(), Some(repository.clone()));
            match image::parse(&repository) {
                Ok(again) => {
                    assert_eq!(
                        (&again.registry, &again.path),
                        (&parsed.registry, &parsed.path)
                    );
                    assert_eq!((again.tag, again.digest), (None, None));
                }
                Err(e) => panic!("{reference:?} -> repository {repository:?}: {e}"),
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with("invalid image reference \""),
                "{message}"
            );
            assert!(
                message.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "not one printable line: {message:?}"
            );
            assert!(reference.starts_with(e.reference()), "{message}");
        }
    }
});
