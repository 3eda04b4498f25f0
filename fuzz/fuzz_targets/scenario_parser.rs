//! Arbitrary text into the scenario parser: never a panic, every error names a line that
//! exists, and whatever parses prints back to text that parses to the same scenario.
#![no_main]

use attach_detach::sim::scenario::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse(text) {
        Ok(scenario) => {
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
            let lines = text.lines().count().max(1);
            assert!(
                (1..=lines + 1).contains(&error.line),
                "error names line {} of {lines}: {error}",
                error.line
            );
        }
    }
});
