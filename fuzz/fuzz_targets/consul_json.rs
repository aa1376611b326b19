#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tributary_fuzz::consul_json(data));
