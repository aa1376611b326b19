//! Goals from a run's JSON line: the fixture is `run --json` output (a trimmed table, then the
//! JSON line) with one goal met by a margin, one missed, one without a floor.

#![allow(clippy::unwrap_used)]

use super::*;

const FIXTURE: &str = include_str!("run-sotw.txt");

fn verdicts(goals: &[Goal]) -> Vec<(&str, bool)> {
    goals.iter().map(|g| (g.name.as_str(), g.met)).collect()
}

#[test]
fn the_fixture_run_meets_the_storm_and_new_service_goals_only() {
    let goals = goals_of(FIXTURE, "fixture").unwrap();
    assert_eq!(
        verdicts(&goals),
        [
            ("cold-start storm ≤ 1.5× floor", true),
            ("endpoint change p50 ≤ 1.5× floor", false),
            ("new service p50 ≤ 1.5× floor", true),
            ("delete service p50 ≤ 1.5× floor", false),
            ("memory per client ≤ floor + 16 KiB", false),
        ]
    );
    let storm = &goals[0];
    assert!((storm.value.unwrap() - 26.1 / 18.5).abs() < 1e-9);
    assert_eq!(storm.bound, Some(RATIO_BOUND));
    assert!((goals[1].value.unwrap() - 1069.0 / 77.7).abs() < 1e-9);
    assert_eq!(
        goals[3].value, None,
        "no floor for delete: not measured, missed"
    );
    let memory = &goals[4];
    assert_eq!(memory.value, Some(216_000.0));
    assert_eq!(memory.bound, Some(3100.0 + 16384.0));
    assert_eq!(
        goals[3].to_string(),
        "delete service p50 ≤ 1.5× floor: MISSED (not measured)"
    );
    assert_eq!(
        goals[0].to_string(),
        "cold-start storm ≤ 1.5× floor: met (1.41 vs bound 1.50)"
    );
}

#[test]
fn bounds_are_inclusive_and_memory_uses_the_floor_plus_16_kib() {
    let row = |key: &str, tributary: f64, floor: f64| Row {
        key: key.into(),
        tributary,
        floor: Some(floor),
    };
    let rows = [
        row("storm", 15.0, 10.0),
        row("endpoint.p50", 150.1, 100.0),
        row("new_service.p50", 3.0, 2.0),
        row("delete_service.p50", 2.9, 2.0),
        row("memory", 3000.0 + 16384.0, 3000.0),
    ];
    let goals = Goal::of_rows(&rows);
    assert_eq!(
        goals.iter().map(|g| g.met).collect::<Vec<_>>(),
        [true, false, true, true, true]
    );
    let memory = Memory::of_rows(&rows);
    assert_eq!(memory.bound, Some(19384.0));
    assert!(!Goal::of_rows(&[row("memory", 19385.0, 3000.0)])[4].met);
}

#[test]
fn check_reads_a_file_and_says_whether_every_goal_is_met() {
    let dir = std::env::temp_dir().join(format!("goals-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.txt");
    std::fs::write(&path, FIXTURE).unwrap();
    assert!(!check_file(&path).unwrap(), "the fixture misses goals");
    let met = FIXTURE
        .replace("\"tributary\": 1069.0", "\"tributary\": 80.0")
        .replace("\"tributary\": 216000.0", "\"tributary\": 9000.0")
        .replace(
            "\"tributary\": 16000.0, \"floor\": null",
            "\"tributary\": 16000.0, \"floor\": 12000.0",
        );
    assert_ne!(met, FIXTURE);
    std::fs::write(&path, &met).unwrap();
    assert!(check_file(&path).unwrap(), "every goal met: {met}");
    std::fs::write(&path, "no json here\n").unwrap();
    assert!(matches!(check_file(&path), Err(CheckError::NoJson(_))));
    std::fs::write(&path, "{\"measures\": [{\"tributary\": 1.0}]}\n").unwrap();
    assert!(matches!(check_file(&path), Err(CheckError::Parse { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(check_file(&path), Err(CheckError::Read { .. })));
}
