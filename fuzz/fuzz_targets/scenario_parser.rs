//! Arbitrary bytes into the scenario parser: never a panic, every error names a line that
//! exists and shows no control character raw, text that is not UTF-8 is refused (on its line),
//! and whatever parses prints back to text that parses to the same scenario.
#![no_main]

use attach_detach::sim::scenario::{parse, parse_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = std::str::from_utf8(data);
    let parsed = parse_bytes(data);
    if let Ok(text) = text {
        assert_eq!(parsed, parse(text), "bytes and text parse alike");
    }
    match parsed {
        Ok(scenario) => {
            assert!(text.is_ok(), "parsed text that is not UTF-8");
            let printed = scenario.to_text();
            let again = parse(&printed)
                .unwrap_or_else(|e| panic!("printed scenario does not parse: {e}\n{printed}"));
            let strip = |s: &attach_detach::sim::scenario::Scenario| {
                let mut s = s.clone();
                s.steps.iter_mut().for_each(|step| step.line = 0);
                s
            };
            assert_eq!(
                strip(&scenario),
                strip(&again),
                "round trip changed the scenario"
            );
        }
        Err(error) => {
            assert!(
                !error.to_string().chars().any(char::is_control),
                "a control character shown raw: {error:?}"
            );
            let lines = data.split(|b| *b == b'\n').count();
            assert!(
                (1..=lines + 1).contains(&error.line),
                "error names line {} of {lines}: {error}",
                error.line
            );
        }
    }
});
