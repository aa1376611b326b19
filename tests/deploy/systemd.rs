//! Every unit in deploy/systemd/, and the VM example config.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use tributary::config::Config;

use super::tools;
use super::{read, root};

/// DEPLOY-10: the exposure `systemd-analyze security` may rate a unit at, exclusive.
const MAX_EXPOSURE: f64 = 2.0;
/// Where the units install the binary; the checks point ExecStart at the one cargo built.
const INSTALLED_BINARY: &str = "/usr/local/bin/tributary";

fn units() -> Vec<PathBuf> {
    let mut units: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/systemd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    units.sort();
    assert!(!units.is_empty(), "no units in deploy/systemd");
    units
}

/// The unit with ExecStart pointing at the binary under test, in a scratch directory (verify
/// checks that the command exists and is executable).
fn with_test_binary(unit: &Path, dir: &Path) -> PathBuf {
    let text = read(unit).replace(INSTALLED_BINARY, env!("CARGO_BIN_EXE_tributary"));
    let out = dir.join(unit.file_name().unwrap());
    std::fs::write(&out, text).unwrap();
    out
}

#[test]
fn units_pass_systemd_analyze_verify() {
    // DEPLOY-10
    let dir = tempfile::tempdir().unwrap();
    for unit in units() {
        let copy = with_test_binary(&unit, dir.path());
        let Some(run) = tools::systemd_analyze(&[OsStr::new("verify"), copy.as_os_str()]) else {
            return;
        };
        assert!(
            run.ok && run.stderr.trim().is_empty(),
            "systemd-analyze verify {}:\n{}{}",
            unit.display(),
            run.stdout,
            run.stderr
        );
    }
}

#[test]
fn units_rate_below_two_in_systemd_analyze_security() {
    // DEPLOY-10
    for unit in units() {
        let Some(run) = tools::systemd_analyze(&[
            OsStr::new("security"),
            OsStr::new("--offline=true"),
            OsStr::new("--no-pager"),
            unit.as_os_str(),
        ]) else {
            return;
        };
        assert!(
            run.ok,
            "systemd-analyze security {}: {}",
            unit.display(),
            run.stderr
        );
        let exposure: f64 = run
            .stdout
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|rest| rest.split(": ").nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no overall exposure in:\n{}", run.stdout));
        assert!(
            exposure < MAX_EXPOSURE,
            "{} rates {exposure} (must be below {MAX_EXPOSURE}):\n{}",
            unit.display(),
            run.stdout
        );
    }
}

#[test]
fn server_unit_and_example_config_agree() {
    let unit = read(&root().join("deploy/systemd/tributary.service"));
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    assert!(
        exec.starts_with(INSTALLED_BINARY)
            && exec.contains("--config /etc/tributary/tributary.yaml"),
        "{exec}"
    );
    for needle in [
        "User=tributary",
        "KillSignal=SIGTERM",
        "After=network-online.target consul.service",
    ] {
        assert!(unit.contains(needle), "unit lacks {needle}");
    }
    let config = Config::from_yaml(&read(&root().join("deploy/systemd/tributary.yaml")))
        .expect("example config is valid");
    assert!(config.tls.is_some());
    assert!(config.xds_addr.ip().is_loopback());
}
